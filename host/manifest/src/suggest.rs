//! "Did you mean" suggestions.

/// The candidate closest to `word`, if it is close enough to be a likely typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let limit = (word.chars().count() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// `; did you mean `CLOSEST`?` for the [`did_you_mean`] candidate, or nothing: the tail of a
/// message saying `word` is unknown.
pub fn did_you_mean_hint<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(word, candidates)
        .map(|s| format!("; did you mean `{s}`?"))
        .unwrap_or_default()
}
