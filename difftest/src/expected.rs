//! The differences we know of, each with its reason: a defect to fix (the test still
//! passes, and the table says so) or a deliberate choice that docs/design.md ("Where
//! rworker differs from the stock MPMs, and why") argues for. Any other difference fails the
//! CI subset.

/// Why rworker differs there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A defect, being fixed: the entry goes when the fix lands.
    Defect,
    /// On purpose: better for a user (docs/design.md says why).
    Deliberate,
}

/// One known difference.
#[derive(Clone, Copy, Debug)]
pub struct Known {
    pub scenario: &'static str,
    /// [`crate::mpm::Pair::name`].
    pub pair: &'static str,
    pub kind: Kind,
    pub why: &'static str,
}

/// Every known difference.
pub const KNOWN: &[Known] = &[];

/// The entry for `scenario` on `pair`, if any.
pub fn lookup(scenario: &str, pair: &str) -> Option<&'static Known> {
    KNOWN
        .iter()
        .find(|k| k.scenario == scenario && k.pair == pair)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mpm::Pair;

    /// Every entry names a scenario and a pair that exist.
    #[test]
    fn entries_name_real_scenarios() {
        let names: Vec<&str> = crate::scenarios::all().iter().map(|s| s.name).collect();
        for k in KNOWN {
            assert!(
                names.contains(&k.scenario),
                "unknown scenario {}",
                k.scenario
            );
            assert!(Pair::by_name(k.pair).is_some(), "unknown pair {}", k.pair);
            assert!(!k.why.is_empty());
        }
    }
}
