//! The RESP wire protocol: the resumable request parser and the reply builder.
//!
//! Requests are arrays of bulk strings (or inline lines) in both RESP2 and RESP3; only replies
//! differ by protocol version, and every reply byte is produced by `reply::Reply`.

pub mod parse;
pub mod read;
pub mod reply;
