//! `agentmesh store migrate [DIR] [--url URL]`: the PostgreSQL store's schema;
//! `agentmesh store copy --from DATA_DIR --to URL`: a sled store moved into a database.

use std::path::PathBuf;
use std::process::ExitCode;

use agentmesh_store::Leases;
use anyhow::{Context, bail};

/// Arguments of `store`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Apply the schema migrations a PostgreSQL database lacks, without serving.
    Migrate(Migrate),
    /// Copy a sled store (a data dir) into a PostgreSQL database no host has used.
    Copy(CopyArgs),
}

/// Arguments of `store copy`.
#[derive(clap::Args)]
struct CopyArgs {
    /// The data dir whose store to copy (no host may be serving it).
    #[arg(long)]
    from: PathBuf,
    /// The database (`postgres://…`); its schema is migrated first.
    #[arg(long)]
    to: String,
}

/// Arguments of `store migrate`.
#[derive(clap::Args)]
struct Migrate {
    /// A config dir whose host config's `store` names the database.
    dir: Option<PathBuf>,
    /// The database (`postgres://…`); else the config dir's, else `DATABASE_URL`.
    #[arg(long)]
    url: Option<String>,
}

/// Runs the `store` subcommand.
pub fn execute(args: &Args) -> anyhow::Result<ExitCode> {
    match &args.command {
        Command::Migrate(m) => migrate(m),
        Command::Copy(c) => copy(c),
    }
}

fn copy(args: &CopyArgs) -> anyhow::Result<ExitCode> {
    // Reading must not create: a mistyped `--from` would otherwise copy an empty store.
    if !agentmesh_store::exists(&args.from) {
        bail!(
            "no store in {}: give the data dir of a host (by default the config dir's \
             `.agentmesh`, or the host config's `data_dir`)",
            args.from.display()
        );
    }
    let from = agentmesh_store::SledStore::open(&args.from).with_context(|| {
        format!(
            "opening the store in {} (a host serving it holds it: stop it first)",
            args.from.display()
        )
    })?;
    let to = agentmesh_store::PgStore::open(&agentmesh_store::PgOptions {
        url: args.to.clone(),
        pool: 1,
        lease: agentmesh_store::postgres::DEFAULT_LEASE,
    })
    .map_err(anyhow::Error::new)
    .context("opening the PostgreSQL store")?;
    let copied = to
        .import(|visit| from.export(visit))
        .map_err(anyhow::Error::new)
        .context("copying the store")?;
    to.end_host()
        .map_err(anyhow::Error::new)
        .context("closing the PostgreSQL store")?;
    println!("ok: copied {copied}");
    Ok(ExitCode::SUCCESS)
}

fn migrate(args: &Migrate) -> anyhow::Result<ExitCode> {
    let configured = match &args.dir {
        Some(dir) => {
            let report = agentmesh_manifest::validate(dir);
            if let Some(d) = report.diagnostics.iter().find(|d| d.is_error()) {
                bail!("{d}");
            }
            super::postgres_options(&report.config.host_config())
        }
        None => None,
    };
    let url = match (&args.url, configured, std::env::var("DATABASE_URL")) {
        (Some(url), _, _) => url.clone(),
        (None, Some(options), _) => options.url,
        (None, None, Ok(url)) if !url.is_empty() => url,
        _ => bail!(
            "no database to migrate: give `--url postgres://…`, a config dir whose host config \
             has `store: {{backend: postgres, url: …}}`, or set DATABASE_URL"
        ),
    };
    let (before, after) = agentmesh_store::postgres::migrate(&agentmesh_store::PgOptions {
        url,
        pool: 1,
        lease: agentmesh_store::postgres::DEFAULT_LEASE,
    })
    .map_err(anyhow::Error::new)
    .context("migrating the PostgreSQL store")?;
    if before == after {
        println!("ok: schema version {after}, nothing to apply");
    } else {
        println!("ok: schema version {before} → {after}");
    }
    Ok(ExitCode::SUCCESS)
}
