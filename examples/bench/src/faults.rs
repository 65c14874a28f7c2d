//! `--only faults`: the cluster's fault scenarios repeated for their counts, not their speed
//! (docs/cluster.md, "What happens when…"). The freeze of the report (lease 3 s, a 9 s
//! SIGSTOP of the node delivering an ordered endpoint with `max_in_flight: 1`, 150 events of
//! one key, a 40 ms receiver) `--freeze-runs` times, then a randomized run of kills, freezes,
//! cuts, delays and database restarts for `--random-minutes`. Each on a private PostgreSQL
//! server (`initdb`, `pg_ctl`), with the nodes being this executable (`__hookgate serve`).
//!
//! The harness is the test suite's (`gateway/tests/support/faults/`), included as it is.

use std::process::ExitCode;
use std::time::Duration;

#[path = "../../../gateway/tests/support/faults/mod.rs"]
mod harness;

use harness::pg::PrivatePostgres;
use harness::scenarios::{self, FreezeOptions, Program};

pub(crate) struct FaultArgs {
    pub(crate) freeze_runs: usize,
    pub(crate) random_minutes: f64,
    pub(crate) seed: Option<u64>,
}

pub(crate) async fn run(args: FaultArgs) -> ExitCode {
    let Some(bin) = harness::pg::tools() else {
        eprintln!("faults: needs PostgreSQL's initdb and pg_ctl (apt-get install postgresql)");
        return ExitCode::FAILURE;
    };
    let pg = match PrivatePostgres::start(&bin) {
        Ok(pg) => pg,
        Err(e) => {
            eprintln!("faults: cannot start a private PostgreSQL server: {e}");
            return ExitCode::FAILURE;
        }
    };
    let program = Program {
        program: match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                eprintln!("faults: {e}");
                return ExitCode::FAILURE;
            }
        },
        args: vec!["__hookgate".into()],
    };
    let mut broken = 0;
    let options = FreezeOptions::as_reported();
    let mut totals = [0usize; 4];
    for run in 0..args.freeze_runs {
        eprintln!(
            "[freeze {}/{}] (load average {:.2})",
            run + 1,
            args.freeze_runs,
            crate::load_average()
        );
        let r = scenarios::freeze(&pg, &format!("freeze{run}"), &program, &options).await;
        let mut problems = r.verdict.problems();
        if !r.all_delivered {
            problems.push("not everything arrived".into());
        }
        if r.verdict.duplicates != r.verdict.duplicates_at_freeze || r.resent_after_waking > 0 {
            problems.push(format!(
                "{} duplicates not explained by the freeze, {} resent after waking",
                r.verdict.duplicates - r.verdict.duplicates_at_freeze,
                r.resent_after_waking
            ));
        }
        totals[0] += r.verdict.duplicates;
        totals[1] += r.delivered_while_frozen;
        totals[2] += usize::from(r.verdict.most_at_once.values().any(|m| *m > 1));
        totals[3] += r.verdict.inversions.len();
        println!(
            "freeze {run}: {}; {} delivered by the other node while frozen; woken node: {} lapses, {} fenced{}",
            r.verdict.summary(),
            r.delivered_while_frozen,
            r.lapses,
            r.fenced,
            if problems.is_empty() {
                String::new()
            } else {
                format!("; BROKEN: {problems:?}")
            }
        );
        if !problems.is_empty() {
            broken += 1;
            eprintln!("{}", r.logs);
        }
    }
    if args.freeze_runs > 0 {
        println!(
            "freeze: {} runs, {broken} broken; duplicates {} in all (each of an attempt running at the freeze), \
             runs with two requests at once {}, order inversions {}; {} deliveries by the other node while frozen",
            args.freeze_runs, totals[0], totals[2], totals[3], totals[1]
        );
    }
    if args.random_minutes > 0.0 {
        let seed = args.seed.unwrap_or_else(scenarios::seed_from_env);
        let duration = Duration::from_secs_f64(args.random_minutes * 60.0);
        eprintln!(
            "[randomized {:.1} min, seed {seed}] (load average {:.2})",
            args.random_minutes,
            crate::load_average()
        );
        let r = scenarios::randomized(
            &pg,
            "random",
            &program,
            Duration::from_secs(3),
            duration,
            seed,
            true,
        )
        .await;
        let mut problems = r.verdict.problems();
        if !r.all_delivered {
            problems.push("not everything arrived".into());
        }
        println!(
            "randomized, seed {seed} ({:.1} min): kills {}, freezes {}, cuts {}, delays {}, database restarts {}; {}{}",
            args.random_minutes,
            r.counts[0],
            r.counts[1],
            r.counts[2],
            r.counts[3],
            r.counts[4],
            r.verdict.summary(),
            if problems.is_empty() {
                String::new()
            } else {
                format!("; BROKEN: {problems:?}")
            }
        );
        eprintln!("{}", r.actions.join("\n"));
        if !problems.is_empty() {
            broken += 1;
            eprintln!("{}", r.logs);
        }
    }
    if broken == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
