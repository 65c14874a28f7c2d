//! `hookgate migrate --from ./data/hookgate.db --to postgres://…`: moving a gateway from its
//! SQLite file onto PostgreSQL, with a progress bar per table.

use std::path::Path;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressStyle};

use crate::store::{CopyProgress, copy_sqlite_to_postgres};

/// Copies the store and prints what was copied; the URL is never printed (it may hold a
/// password).
pub(super) fn run(from: &Path, to: &str) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len} rows ({elapsed})") {
        bar.set_style(style.progress_chars("=> "));
    }
    let show = |p: CopyProgress| {
        if bar.message() != p.table {
            bar.set_message(p.table);
            bar.set_length(p.total);
        }
        bar.set_position(p.copied);
    };
    match runtime.block_on(copy_sqlite_to_postgres(from, to, show)) {
        Ok(copied) => {
            bar.finish_and_clear();
            for (table, rows) in copied {
                println!("{table:>16}: {rows} rows");
            }
            println!(
                "copied {} into PostgreSQL; point storage.url at it and start the gateway",
                from.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            bar.abandon();
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
