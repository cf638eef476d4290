//! Every guest component crate of `guests/` has a test in this binary (library crates that
//! components share, such as the test programs' glue, build no component).

use crate::util::repo_root;

/// The modules of this test binary (their sources are searched for `load("…")`/`guest("…")`).
const SOURCES: [&str; 10] = [
    include_str!("cache.rs"),
    include_str!("capacity.rs"),
    include_str!("event_filter.rs"),
    include_str!("faults.rs"),
    include_str!("github_pr.rs"),
    include_str!("kv.rs"),
    include_str!("limits.rs"),
    include_str!("middleware.rs"),
    include_str!("registry.rs"),
    include_str!("util.rs"),
];

#[test]
fn every_guest_crate_has_a_test() {
    let workspace = std::fs::read_to_string(repo_root().join("guests/Cargo.toml")).unwrap();
    let manifest: Vec<&str> = workspace.lines().collect();
    let start = manifest
        .iter()
        .position(|l| l.starts_with("members"))
        .unwrap();
    let members: Vec<String> = manifest[start + 1..]
        .iter()
        .take_while(|l| !l.starts_with(']'))
        .map(|l| l.trim().trim_end_matches(',').trim_matches('"').to_owned())
        .collect();
    assert!(members.len() >= 10, "{members:?}");
    let mut untested = Vec::new();
    for member in &members {
        let cargo =
            std::fs::read_to_string(repo_root().join("guests").join(member).join("Cargo.toml"))
                .unwrap();
        if !cargo.contains("cdylib") {
            continue;
        }
        let package = cargo
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .map(|n| n.trim_end_matches('"').to_owned())
            .unwrap();
        let used = SOURCES.iter().any(|s| {
            s.contains(&format!("load(\"{package}\")"))
                || s.contains(&format!("guest(\"{package}\")"))
        });
        if !used {
            untested.push(package);
        }
    }
    assert!(
        untested.is_empty(),
        "guest crates without a test: {untested:?}"
    );
}
