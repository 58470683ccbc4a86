//! The client ledger: every operation the workload issued, with where, what, and how it ended
//! (testing.md §5.6): `ok` acknowledged, `fail` definitely not applied, `info` unknown (a
//! timeout or a connection lost after sending). Written as JSONL into the run's directory.

use std::io::Write as _;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    Ok,
    Fail,
    Info,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Fail => "fail",
            Outcome::Info => "info",
        }
    }
}

/// The operations the workload issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    Set,
    Get,
    IncrBy,
    Sadd,
    Srem,
    SrandMember,
    Del,
    Hset,
    Hdel,
    Hget,
    Zadd,
    Zincrby,
    Zrem,
    ZrandMember,
    Rpush,
    Lpop,
    Expire,
    Persist,
    Pfadd,
    Pfcount,
}

impl Op {
    pub fn name(self) -> &'static str {
        match self {
            Op::Set => "SET",
            Op::Get => "GET",
            Op::IncrBy => "INCRBY",
            Op::Sadd => "SADD",
            Op::Srem => "SREM",
            Op::SrandMember => "SRANDMEMBER",
            Op::Del => "DEL",
            Op::Hset => "HSET",
            Op::Hdel => "HDEL",
            Op::Hget => "HGET",
            Op::Zadd => "ZADD",
            Op::Zincrby => "ZINCRBY",
            Op::Zrem => "ZREM",
            Op::ZrandMember => "ZRANDMEMBER",
            Op::Rpush => "RPUSH",
            Op::Lpop => "LPOP",
            Op::Expire => "EXPIRE",
            Op::Persist => "PERSIST",
            Op::Pfadd => "PFADD",
            Op::Pfcount => "PFCOUNT",
        }
    }

    /// Whether the op changes data (reads are kept for the causal checks).
    pub fn is_write(self) -> bool {
        !matches!(
            self,
            Op::Get | Op::SrandMember | Op::Hget | Op::ZrandMember | Op::Pfcount
        )
    }
}

/// One operation. Times are microseconds since the run's origin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub site: usize,
    pub client: u32,
    pub seq: u64,
    pub op: Op,
    pub key: String,
    /// The element, member, field, value or delta the op names.
    pub arg: String,
    /// A second argument: the HSET value, the ZADD score, the ZINCRBY delta.
    pub val: String,
    pub outcome: Outcome,
    /// The reply as text ("(nil)" for nil); empty for `info`.
    pub reply: String,
    pub t_inv_us: u64,
    pub t_done_us: u64,
}

impl Record {
    pub fn ok(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    /// Applied or possibly applied.
    pub fn maybe(&self) -> bool {
        self.outcome != Outcome::Fail
    }
}

fn json_str(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One record as a JSON object (testing.md §5.6 field names).
pub fn to_json(r: &Record, site_ids: &[String]) -> String {
    let mut s = String::with_capacity(160);
    s.push_str(&format!(
        "{{\"t_inv\":{},\"t_done\":{},\"site\":",
        r.t_inv_us, r.t_done_us
    ));
    json_str(
        site_ids.get(r.site).map(String::as_str).unwrap_or("?"),
        &mut s,
    );
    s.push_str(&format!(
        ",\"client\":{},\"seq\":{},\"op\":",
        r.client, r.seq
    ));
    json_str(r.op.name(), &mut s);
    s.push_str(",\"key\":");
    json_str(&r.key, &mut s);
    s.push_str(",\"arg\":");
    json_str(&r.arg, &mut s);
    if !r.val.is_empty() {
        s.push_str(",\"val\":");
        json_str(&r.val, &mut s);
    }
    s.push_str(",\"result\":");
    json_str(r.outcome.name(), &mut s);
    s.push_str(",\"reply\":");
    json_str(&r.reply, &mut s);
    s.push('}');
    s
}

/// Writes the ledger as JSONL.
pub fn write(path: &Path, records: &[Record], site_ids: &[String]) -> std::io::Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in records {
        writeln!(f, "{}", to_json(r, site_ids))?;
    }
    f.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_and_names_fields() {
        let r = Record {
            site: 0,
            client: 1,
            seq: 2,
            op: Op::Set,
            key: "str:1".into(),
            arg: "a\"b".into(),
            val: String::new(),
            outcome: Outcome::Info,
            reply: String::new(),
            t_inv_us: 5,
            t_done_us: 6,
        };
        let j = to_json(&r, &["a".to_string()]);
        assert_eq!(
            j,
            r#"{"t_inv":5,"t_done":6,"site":"a","client":1,"seq":2,"op":"SET","key":"str:1","arg":"a\"b","result":"info","reply":""}"#
        );
    }
}
