//! What a scenario records: an ordered list of facts a client could see, already
//! normalised, so that two observations are the same exactly when they are equal. Times
//! are put in buckets named after the configured values a scenario expects ([`Scale`]):
//! "~2 s (KeepAliveTimeout)", "at once", "between ~2 s and ~6 s"; noise within a bucket
//! does not count.

use std::time::Duration;

/// The facts one scenario recorded against one server, in order; and notes, shown in the
/// table but not compared (a value one MPM keeps current and another refreshes now and
/// then).
#[derive(Clone, Debug, Default)]
pub struct Observation {
    pub facts: Vec<(String, String)>,
    pub notes: Vec<(String, String)>,
}

/// Two observations are the same when their facts are; notes do not count.
impl PartialEq for Observation {
    fn eq(&self, other: &Observation) -> bool {
        self.facts == other.facts
    }
}

impl Eq for Observation {}

impl Observation {
    pub fn new() -> Observation {
        Observation::default()
    }

    /// Records `value` under `what` ("response 1", "close", "GOAWAY").
    pub fn add(&mut self, what: impl Into<String>, value: impl Into<String>) {
        self.facts.push((what.into(), value.into()));
    }

    /// Records `value` under `what`, shown but not compared.
    pub fn note(&mut self, what: impl Into<String>, value: impl Into<String>) {
        self.notes.push((what.into(), value.into()));
    }

    /// The facts as one line, `what: value; what: value`, then the notes in brackets.
    pub fn render(&self) -> String {
        let facts = self
            .facts
            .iter()
            .map(|(w, v)| format!("{w}: {v}"))
            .collect::<Vec<_>>()
            .join("; ");
        if self.notes.is_empty() {
            return facts;
        }
        let notes = self
            .notes
            .iter()
            .map(|(w, v)| format!("{w}: {v}"))
            .collect::<Vec<_>>()
            .join("; ");
        format!("{facts} [not compared: {notes}]")
    }

    /// Whether a harness error (not the server's behaviour) ended the scenario.
    pub fn harness_error(&self) -> Option<&str> {
        self.facts
            .iter()
            .find(|(w, _)| w == HARNESS_ERROR)
            .map(|(_, v)| v.as_str())
    }
}

/// The fact name under which a scenario's own failure (a client that could not connect, a
/// certificate that failed) is recorded.
pub const HARNESS_ERROR: &str = "harness error";

/// A configured time a scenario expects an event near.
#[derive(Clone, Debug)]
struct Mark {
    secs: f64,
    name: String,
}

/// Seconds as a short string: 2 -> "2", 4.5 -> "4.5".
pub fn secs(s: f64) -> String {
    if (s - s.round()).abs() < 1e-9 {
        format!("{}", s.round() as i64)
    } else {
        format!("{s:.1}")
    }
}

/// A scenario's time scale: its marks, ascending. An event within
/// [mark - max(0.35 s, 8 %), mark + max(1 s, 25 %)] is reported as at that mark (a loaded
/// machine is late more than early).
#[derive(Clone, Debug)]
pub struct Scale {
    marks: Vec<Mark>,
}

impl Scale {
    /// Marks as (seconds, name); sorted here.
    pub fn new(marks: &[(f64, &str)]) -> Scale {
        let mut marks: Vec<Mark> = marks
            .iter()
            .map(|&(secs, name)| Mark {
                secs,
                name: name.to_owned(),
            })
            .collect();
        marks.sort_by(|a, b| a.secs.total_cmp(&b.secs));
        Scale { marks }
    }

    fn window(m: &Mark) -> (f64, f64) {
        (
            m.secs - (0.08 * m.secs).max(0.35),
            m.secs + (0.25 * m.secs).max(1.0),
        )
    }

    /// The bucket `d` falls in; with `RWORKER_DIFF_RAW` set, the measured time after it
    /// (to see where a bucket's edges fall; the table then never agrees).
    pub fn bucket(&self, d: Duration) -> String {
        let b = self.bucket_of(d.as_secs_f64());
        if std::env::var_os("RWORKER_DIFF_RAW").is_some() {
            format!("{b} [{:.2} s]", d.as_secs_f64())
        } else {
            b
        }
    }

    fn bucket_of(&self, t: f64) -> String {
        if let Some(m) = self.marks.iter().find(|m| {
            let (lo, hi) = Scale::window(m);
            lo <= t && t <= hi
        }) {
            return format!("~{} s ({})", secs(m.secs), m.name);
        }
        if t < 0.5 {
            return "at once".into();
        }
        let below = self.marks.iter().rev().find(|m| Scale::window(m).1 < t);
        let above = self.marks.iter().find(|m| Scale::window(m).0 > t);
        match (below, above) {
            (Some(a), Some(b)) => format!("between ~{} s and ~{} s", secs(a.secs), secs(b.secs)),
            (None, Some(b)) => format!("before ~{} s ({})", secs(b.secs), b.name),
            (Some(a), None) => format!("after ~{} s ({})", secs(a.secs), a.name),
            (None, None) => "after 0.5 s".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn buckets() {
        let s = Scale::new(&[(6.0, "vhost KeepAliveTimeout"), (2.0, "KeepAliveTimeout")]);
        assert_eq!(s.bucket(ms(100)), "at once");
        assert_eq!(s.bucket(ms(1700)), "~2 s (KeepAliveTimeout)");
        assert_eq!(s.bucket(ms(2900)), "~2 s (KeepAliveTimeout)");
        assert_eq!(s.bucket(ms(4000)), "between ~2 s and ~6 s");
        assert_eq!(s.bucket(ms(7100)), "~6 s (vhost KeepAliveTimeout)");
        assert_eq!(s.bucket(ms(9000)), "after ~6 s (vhost KeepAliveTimeout)");
        assert_eq!(s.bucket(ms(1000)), "before ~2 s (KeepAliveTimeout)");
        let zero = Scale::new(&[(0.0, "the signal")]);
        assert_eq!(zero.bucket(ms(300)), "~0 s (the signal)");
    }

    #[test]
    fn render_and_equality() {
        let mut a = Observation::new();
        a.add("response 1", "200");
        a.add("close", "FIN at ~2 s");
        assert_eq!(a.render(), "response 1: 200; close: FIN at ~2 s");
        let mut b = a.clone();
        assert_eq!(a, b);
        b.note("count", "3");
        assert_eq!(a, b, "notes do not count");
        assert_eq!(
            b.render(),
            "response 1: 200; close: FIN at ~2 s [not compared: count: 3]"
        );
        b.add(HARNESS_ERROR, "x");
        assert_ne!(a, b);
        assert_eq!(b.harness_error(), Some("x"));
    }
}
