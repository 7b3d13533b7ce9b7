//! The table: scenario | pair | reference MPM | rworker | same?, as markdown (printed, and
//! written to `--out`), with a summary and the known differences' reasons.

use crate::expected::{self, Kind};
use crate::runner::{Outcome, RunReport};
use std::time::UNIX_EPOCH;

/// A cell's text with the table's delimiters escaped.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

/// The verdict of one outcome.
pub fn verdict(o: &Outcome) -> String {
    if o.same() {
        return if o.first_try.is_some() {
            "yes (2nd try; the 1st differed)".into()
        } else {
            "yes".into()
        };
    }
    match expected::lookup(o.scenario, o.pair.name()) {
        Some(k) if k.kind == Kind::Defect => "**no**: known defect".into(),
        Some(_) => "**no**: deliberate".into(),
        None => "**NO: unexpected**".into(),
    }
}

/// Outcomes that differ and are not in the known list.
pub fn unexpected(r: &RunReport) -> Vec<&Outcome> {
    r.outcomes
        .iter()
        .filter(|o| !o.same() && expected::lookup(o.scenario, o.pair.name()).is_none())
        .collect()
}

/// Known differences that this run did not see (stale entries, or a fix that landed).
pub fn stale(r: &RunReport) -> Vec<&'static expected::Known> {
    expected::KNOWN
        .iter()
        .filter(|k| {
            r.outcomes
                .iter()
                .any(|o| o.scenario == k.scenario && o.pair.name() == k.pair && o.same())
        })
        .collect()
}

/// A UTC date and time (`2026-12-07 03:10 UTC`) from the run's start.
fn utc(r: &RunReport) -> String {
    let secs = r
        .started
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// The date alone (`2026-12-07`), for file names.
pub fn date(r: &RunReport) -> String {
    utc(r)[..10].to_owned()
}

/// The whole report as markdown.
pub fn markdown(r: &RunReport) -> String {
    let mut s = String::new();
    let same = r.outcomes.iter().filter(|o| o.same()).count();
    let flaky = r.outcomes.iter().filter(|o| o.first_try.is_some()).count();
    let differ = r.outcomes.len() - same;
    let unexpected = unexpected(r).len();
    s.push_str(&format!(
        "# rworker-diff: {} ({} scenarios{}), {}, {:.0} s\n\n",
        utc(r),
        r.scenario_count,
        if r.fast { ", the fast subset" } else { "" },
        if unexpected == 0 {
            "no unexpected difference"
        } else {
            "UNEXPECTED DIFFERENCES"
        },
        r.elapsed.as_secs_f64()
    ));
    s.push_str(&format!(
        "{} runs (scenario x pair): {same} same ({flaky} of them on a 2nd try), {differ} different ({} known, {unexpected} unexpected).\n\n",
        r.outcomes.len(),
        differ - unexpected
    ));
    s.push_str("Each cell is what a client observed, normalised: times in the scenario's own marks (the configured values, `~2 s (KeepAliveTimeout)`), FIN or RST, status lines, the headers that matter, bodies by length and SHA-256 prefix. Where rworker saw the same, its cell says `same` (with its own not-compared notes where they differ).\n\n");
    s.push_str("| scenario | pair | reference MPM | rworker | same? |\n|---|---|---|---|---|\n");
    for o in &r.outcomes {
        let rw = if !o.same() {
            cell(&o.rworker.render())
        } else if o.rworker.notes != o.reference.notes {
            // The facts agree; what is shown but not compared may not.
            let notes: Vec<String> = o
                .rworker
                .notes
                .iter()
                .map(|(w, v)| format!("{w}: {v}"))
                .collect();
            cell(&format!("same [not compared: {}]", notes.join("; ")))
        } else {
            "same".to_string()
        };
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            o.scenario,
            o.pair.name(),
            cell(&o.reference.render()),
            rw,
            verdict(o)
        ));
    }
    let firsts: Vec<&Outcome> = r
        .outcomes
        .iter()
        .filter(|o| o.first_try.is_some())
        .collect();
    if !firsts.is_empty() {
        s.push_str("\n## Differed on the first try only\n\n");
        for o in firsts {
            if let Some((a, b)) = &o.first_try {
                s.push_str(&format!(
                    "- `{}` ({}): reference {}; rworker {}\n",
                    o.scenario,
                    o.pair.name(),
                    cell(&a.render()),
                    cell(&b.render())
                ));
            }
        }
    }
    let known: Vec<&Outcome> = r
        .outcomes
        .iter()
        .filter(|o| !o.same() && expected::lookup(o.scenario, o.pair.name()).is_some())
        .collect();
    if !known.is_empty() {
        s.push_str("\n## Known differences seen\n\n");
        for o in known {
            if let Some(k) = expected::lookup(o.scenario, o.pair.name()) {
                s.push_str(&format!(
                    "- `{}` ({}), {:?}: {}\n",
                    o.scenario, k.pair, k.kind, k.why
                ));
            }
        }
    }
    let stale = stale(r);
    if !stale.is_empty() {
        s.push_str("\n## Known differences not seen this time (remove the entry once fixed)\n\n");
        for k in stale {
            s.push_str(&format!("- `{}` ({})\n", k.scenario, k.pair));
        }
    }
    if !r.crashes.is_empty() {
        s.push_str("\n## Crash lines in the error logs\n\n");
        for (mpm, lines) in &r.crashes {
            for l in lines {
                s.push_str(&format!("- {mpm}: `{}`\n", cell(l)));
            }
        }
    }
    s
}
