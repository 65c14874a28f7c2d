//! `hookgate migrate --from ./data/hookgate.db --to postgres://…`: moving a gateway from its
//! SQLite file onto PostgreSQL, with a progress bar per table.

use std::path::Path;
use std::process::ExitCode;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::store::{CopyProgress, copy_sqlite_to_postgres};

/// Copies the store and prints what was copied; the URL is never printed (it may hold a
/// password).
pub(super) fn run(from: &Path, to: &str) -> ExitCode {
    // On stderr, and only on a terminal (indicatif hides it otherwise).
    let mut progress = Progress::new(ProgressDrawTarget::stderr);
    let Some(result) = super::block_on(copy_sqlite_to_postgres(from, to, |p| progress.show(p))) else {
        return ExitCode::FAILURE;
    };
    progress.finish();
    match result {
        Ok(copied) => {
            for (table, rows) in copied {
                say!("{table:>16}: {rows} rows");
            }
            say!(
                "copied {} into PostgreSQL; point storage.url at it, set storage.encryption_key to \
                 the SQLite store's key (the secrets are copied encrypted under it: the contents of \
                 {}, or its storage.encryption_key) and start the gateway",
                from.display(),
                crate::store::key_file_of(from).display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A copy's progress on screen: a bar of its own for each table, made with the table's name
/// and row count before it first draws. (One bar relabelled per table drew between the
/// changes of name, length and position: `deliveries [====] 11/8 rows` showed the previous
/// table's count under the next one's name.)
struct Progress<T: Fn() -> ProgressDrawTarget> {
    target: T,
    style: ProgressStyle,
    current: Option<(&'static str, ProgressBar)>,
}

impl<T: Fn() -> ProgressDrawTarget> Progress<T> {
    fn new(target: T) -> Self {
        let style = ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len} rows ({elapsed})")
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
        Progress {
            target,
            style,
            current: None,
        }
    }

    fn show(&mut self, p: CopyProgress) {
        let same_table = self.current.as_ref().is_some_and(|(table, _)| *table == p.table);
        if !same_table {
            self.finish();
            let bar = ProgressBar::with_draw_target(Some(p.total), (self.target)())
                .with_style(self.style.clone())
                .with_message(p.table);
            self.current = Some((p.table, bar));
        }
        if let Some((_, bar)) = &self.current {
            bar.set_position(p.copied);
        }
    }

    /// Takes the bar of the table copied last off the screen (the summary follows).
    fn finish(&mut self) {
        if let Some((_, bar)) = self.current.take() {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::TermLike;

    use super::*;

    /// A terminal that keeps every line drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            100
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.write_str(s)
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            if !s.trim().is_empty() {
                self.0.lock().unwrap().push(s.to_owned());
            }
            Ok(())
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Every frame drawn names a table with that table's own count: `events [====] 11/11`,
    /// never the previous table's count under the next table's name.
    #[test]
    fn every_frame_shows_the_count_of_the_table_it_names() {
        let screen = Screen::default();
        let drawn = screen.clone();
        // Unthrottled: every change is drawn, as a slow enough copy draws them.
        let mut progress = Progress::new(move || ProgressDrawTarget::term_like(Box::new(drawn.clone())));
        let tables = [
            ("events", 11),
            ("deliveries", 8),
            ("endpoint_health", 1),
            ("api_endpoints", 0),
        ];
        for (table, total) in tables {
            for copied in [0, total / 2, total] {
                progress.show(CopyProgress { table, copied, total });
            }
        }
        progress.finish();

        let frames = screen.0.lock().unwrap().clone();
        assert!(!frames.is_empty());
        for frame in &frames {
            let (name, rest) = frame
                .trim_start()
                .split_once(' ')
                .expect("a frame names its table");
            let total = tables
                .iter()
                .find(|(t, _)| *t == name)
                .unwrap_or_else(|| panic!("unknown table in {frame:?}"))
                .1;
            let counts = rest.split(" rows").next().unwrap().rsplit(' ').next().unwrap();
            let (copied, len) = counts.split_once('/').expect("copied/total");
            assert_eq!(len, total.to_string(), "{frame:?}");
            assert!(copied.parse::<u64>().unwrap() <= total, "{frame:?}");
        }
        for (table, total) in tables {
            assert!(
                frames
                    .iter()
                    .any(|f| f.contains(table) && f.contains(&format!(" {total}/{total} rows"))),
                "{table} is shown whole: {frames:#?}"
            );
        }
    }
}
