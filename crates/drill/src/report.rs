//! Results of drills and the final report. The report's last line is exactly
//! `N passed, M failed`; skipped drills are counted on the line before.

use std::fmt::Write as _;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skipped,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::Skipped => "SKIPPED",
        }
    }
}

/// What one drill (a scenario with one seed) found.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub scenario: String,
    pub seed: u64,
    pub status: Status,
    /// Why it failed or was skipped.
    pub reasons: Vec<String>,
    /// Figures: convergence time, full syncs, throughput...
    pub notes: Vec<String>,
    pub took: Duration,
}

impl Outcome {
    pub fn new(scenario: &str, seed: u64) -> Outcome {
        Outcome {
            scenario: scenario.to_string(),
            seed,
            status: Status::Pass,
            reasons: Vec::new(),
            notes: Vec::new(),
            took: Duration::ZERO,
        }
    }

    pub fn fail(&mut self, reason: impl Into<String>) {
        self.status = Status::Fail;
        self.reasons.push(reason.into());
    }

    pub fn skip(&mut self, reason: impl Into<String>) {
        if self.status != Status::Fail {
            self.status = Status::Skipped;
        }
        self.reasons.push(reason.into());
    }

    pub fn note(&mut self, note: impl Into<String>) {
        let n = note.into();
        println!("    {n}");
        self.notes.push(n);
    }

    pub fn text(&self) -> String {
        let mut s = format!(
            "{} {} seed={} ({:.1}s)\n",
            self.status.name(),
            self.scenario,
            self.seed,
            self.took.as_secs_f64()
        );
        for r in &self.reasons {
            let _ = writeln!(s, "  reason: {r}");
        }
        for n in &self.notes {
            let _ = writeln!(s, "  {n}");
        }
        s
    }
}

/// The summary: one line per drill, then the artifacts, skipped count, and the final line.
pub fn summary(outcomes: &[Outcome], artifacts: &str, total: Duration) -> String {
    let mut s = String::from("\n=== drill report ===\n");
    for o in outcomes {
        let _ = writeln!(
            s,
            "{:<8} {:<18} seed={:<6} {:>6.1}s  {}",
            o.status.name(),
            o.scenario,
            o.seed,
            o.took.as_secs_f64(),
            o.reasons.first().map(String::as_str).unwrap_or("")
        );
    }
    let passed = outcomes.iter().filter(|o| o.status == Status::Pass).count();
    let failed = outcomes.iter().filter(|o| o.status == Status::Fail).count();
    let skipped = outcomes
        .iter()
        .filter(|o| o.status == Status::Skipped)
        .count();
    let _ = writeln!(s, "total time {:.1}s", total.as_secs_f64());
    let _ = writeln!(s, "artifacts: {artifacts}");
    let _ = writeln!(s, "{skipped} skipped");
    let _ = write!(s, "{passed} passed, {failed} failed");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_line_is_the_count() {
        let mut a = Outcome::new("x", 1);
        let mut b = Outcome::new("y", 1);
        b.fail("boom");
        let mut c = Outcome::new("z", 1);
        c.skip("no persistence");
        a.took = Duration::from_secs(1);
        let s = summary(&[a, b, c], "/tmp/d", Duration::from_secs(3));
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.last(), Some(&"1 passed, 1 failed"));
        assert_eq!(lines.get(lines.len() - 2), Some(&"1 skipped"));
    }
}
