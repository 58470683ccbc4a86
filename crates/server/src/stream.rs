//! A client connection's byte stream: plain TCP, or TLS over TCP (a rustls session whose
//! handshake `crate::tls::handshake` completed).
//!
//! One type for both, so the connection code (`conn`) and the busy-script side path
//! (`script::busy`) keep one code path; a plain stream costs one branch per call.
//!
//! Contract: every method either never waits (`try_*`, `*_now`) or is cancel-safe
//! (`read_some`, `writable`), and the TLS session is borrowed only inside a call, never across
//! an await, so the connection task and the side path may share the stream by `Rc`. With TLS,
//! plaintext the side path peeked and did not take stays in the stream (`Session::input`) and
//! `read_some` returns it first; ciphertext the socket did not take stays in the session and
//! goes out before any new plaintext is accepted (`try_write`) or when `try_flush` is called.

use std::cell::{Cell, RefCell};
use std::io::{Read as _, Write as _};
use std::os::fd::AsRawFd as _;

use bytes::{Buf as _, BytesMut};
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

/// Plaintext taken from a TLS session per read (rustls holds at most 16 KiB of received
/// plaintext at once).
const TLS_READ_CHUNK_BYTES: usize = 16 * 1024;

/// Input read with its receive time at once (`ClientStream::read_some`): a read asking room
/// for more goes straight into the read buffer, untimed (a large argument's bytes).
const STAMPED_READ_BYTES_MAX: usize = 64 * 1024;

/// Room for one `SCM_TIMESTAMPNS` control message (a header and a `timespec`) and more: a
/// control message that does not fit is dropped by the kernel, never a read's data.
const CONTROL_BYTES: usize = 64;

thread_local! {
    /// Where a plain connection's timed reads land before its read buffer takes them (its
    /// spare room is not initialised memory, which `recvmsg` needs without unsafe code).
    static STAMPED_READ_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; STAMPED_READ_BYTES_MAX]);
}

/// One `recvmsg` of what the socket holds into `buf`, with the kernel's receive time of the
/// last segment it took (`SO_TIMESTAMPNS`: wall-clock nanoseconds), when it gave one.
fn recv_stamped(
    fd: std::os::fd::RawFd,
    buf: &mut [u8],
    flags: nix::sys::socket::MsgFlags,
) -> std::io::Result<(usize, Option<u64>)> {
    #[repr(align(8))]
    struct Control([u8; CONTROL_BYTES]);
    let mut control = Control([0; CONTROL_BYTES]);
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let msg = nix::sys::socket::recvmsg::<()>(fd, &mut iov, Some(&mut control.0), flags)?;
    let mut at = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let nix::sys::socket::ControlMessageOwned::ScmTimestampns(ts) = c {
                let secs = u64::try_from(ts.tv_sec()).unwrap_or(0);
                let nanos = u64::try_from(ts.tv_nsec()).unwrap_or(0);
                at = Some(secs.saturating_mul(1_000_000_000).saturating_add(nanos));
            }
        }
    }
    Ok((msg.bytes, at))
}

/// Asks the kernel to time each segment this socket receives (`SO_TIMESTAMPNS`), so that the
/// order in which clients' commands arrived is known whichever thread reads them first.
/// Input the kernel did not time is timed when it is read: the kernel turns timing on for the
/// stack a moment after the first socket asks (deferred work), and off after the last closes.
fn time_receipts(tcp: &TcpStream) {
    let _ = nix::sys::socket::setsockopt(tcp, nix::sys::socket::sockopt::ReceiveTimestampns, &true);
}

/// Which listener a connection came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `port`: plain TCP.
    Tcp,
    /// `tls-port`: a TLS handshake first (`crate::tls`).
    Tls,
}

/// A connected client's stream (see the module doc).
#[derive(Debug)]
pub struct ClientStream {
    tcp: TcpStream,
    tls: Option<RefCell<Session>>,
    /// When the input of the last read arrived (`read_ns`).
    read_ns: Cell<u64>,
}

#[derive(Debug)]
struct Session {
    conn: rustls::ServerConnection,
    /// Plaintext taken out of the session and not consumed yet (what `peek_now` showed).
    input: BytesMut,
    /// The TCP stream ended (a read returned 0).
    eof: bool,
}

/// `std::io` over the non-blocking socket, for rustls.
#[derive(Clone, Copy)]
struct TryIo<'a> {
    tcp: &'a TcpStream,
    /// Where a read records when its input arrived.
    read_ns: &'a Cell<u64>,
    /// Plain system calls (the side path, while the thread's reactor does not run and its
    /// readiness flags are stale); otherwise tokio's `try_*`, whose WouldBlock clears the
    /// readiness the connection task then waits on.
    raw: bool,
}

impl std::io::Read for TryIo<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let fd = self.tcp.as_raw_fd();
        let (n, at) = if self.raw {
            recv_stamped(fd, buf, nix::sys::socket::MsgFlags::MSG_DONTWAIT)?
        } else {
            self.tcp.try_io(tokio::io::Interest::READABLE, || {
                recv_stamped(fd, buf, nix::sys::socket::MsgFlags::empty())
            })?
        };
        if n > 0 {
            self.read_ns.set(at.unwrap_or_else(crate::time::wall_ns));
        }
        Ok(n)
    }
}

impl std::io::Write for TryIo<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.raw {
            return rustix::net::send(
                self.tcp,
                buf,
                rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL,
            )
            .map_err(std::io::Error::from);
        }
        self.tcp.try_write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn would_block() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::WouldBlock)
}

impl Session {
    /// Writes the ciphertext the session holds. Ok(true): all of it went out.
    fn flush(&mut self, mut io: TryIo<'_>) -> std::io::Result<bool> {
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut io) {
                Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Decrypts the records the session holds; a protocol error sends its alert and fails.
    fn process(&mut self, io: TryIo<'_>) -> std::io::Result<()> {
        self.process_state(io).map(|_| ())
    }

    /// `process`, and what the session then holds for the reader.
    fn process_state(&mut self, io: TryIo<'_>) -> std::io::Result<rustls::IoState> {
        match self.conn.process_new_packets() {
            Ok(state) => Ok(state),
            Err(e) => {
                let _ = self.flush(io);
                Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
            }
        }
    }

    /// Moves decrypted plaintext into `out` (at most one chunk). Ok(None): none now; Ok(Some(0)):
    /// the peer closed.
    fn take_plaintext(&mut self, out: &mut BytesMut) -> std::io::Result<Option<usize>> {
        let start = out.len();
        out.resize(start + TLS_READ_CHUNK_BYTES, 0);
        let r = match out.get_mut(start..) {
            Some(spare) => self.conn.reader().read(spare),
            None => Ok(0),
        };
        let (keep, res) = match r {
            Ok(n) => (n, Ok(Some(n))),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => (0, Ok(None)),
            // The TCP stream ended without close_notify: an end like any other.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => (0, Ok(Some(0))),
            Err(e) => (0, Err(e)),
        };
        out.truncate(start + keep);
        res
    }

    /// Reads what the socket holds (one read) into the session and decrypts it. Ok(false):
    /// nothing to read now.
    fn pull(&mut self, mut io: TryIo<'_>) -> std::io::Result<bool> {
        match self.conn.read_tls(&mut io) {
            Ok(0) => self.eof = true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) => return Err(e),
        }
        self.process(io)?;
        // Alerts, key updates and tickets the records called for (the rest at the next write).
        self.flush(io)?;
        Ok(true)
    }

    /// Accepts what it can of `buf` and writes it out: the bytes taken, or WouldBlock.
    fn write(&mut self, io: TryIo<'_>, buf: &[u8]) -> std::io::Result<usize> {
        if !self.flush(io)? {
            return Err(would_block());
        }
        let n = self.conn.writer().write(buf)?;
        self.flush(io)?;
        if n == 0 && !buf.is_empty() {
            return Err(would_block());
        }
        Ok(n)
    }
}

impl ClientStream {
    /// The socket for the connection task (tokio's readiness).
    fn io(&self) -> TryIo<'_> {
        TryIo {
            tcp: &self.tcp,
            read_ns: &self.read_ns,
            raw: false,
        }
    }

    /// The socket for the side path (plain system calls).
    fn raw_io(&self) -> TryIo<'_> {
        TryIo {
            tcp: &self.tcp,
            read_ns: &self.read_ns,
            raw: true,
        }
    }

    /// A plain TCP connection.
    pub fn plain(tcp: TcpStream) -> ClientStream {
        time_receipts(&tcp);
        ClientStream {
            tcp,
            tls: None,
            read_ns: Cell::new(0),
        }
    }

    /// A TLS connection on `tcp`, its handshake not done yet: `handshake` completes it, and
    /// so do reads (the busy-script side path's included), as rustls answers the handshake's
    /// messages as they come.
    pub fn tls(tcp: TcpStream, conn: rustls::ServerConnection) -> ClientStream {
        time_receipts(&tcp);
        ClientStream {
            read_ns: Cell::new(0),
            tcp,
            tls: Some(RefCell::new(Session {
                conn,
                input: BytesMut::new(),
                eof: false,
            })),
        }
    }

    /// Completes the TLS handshake (at once for plain TCP). Cancel-safe; the caller bounds it
    /// in time (`tls-handshake-timeout-ms`).
    pub async fn handshake(&self) -> std::io::Result<()> {
        let Some(tls) = &self.tls else {
            return Ok(());
        };
        loop {
            let wait_writable = {
                let mut s = tls.borrow_mut();
                // Records the side path read come first.
                s.process(self.io())?;
                let flushed = s.flush(self.io())?;
                if !s.conn.is_handshaking() {
                    return Ok(());
                }
                if s.eof {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                if flushed && s.pull(self.io())? {
                    continue;
                }
                !flushed
            };
            if wait_writable {
                self.tcp.writable().await?;
            } else {
                self.tcp.readable().await?;
            }
        }
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// When the input of the last read arrived: the kernel's receive time (wall-clock
    /// nanoseconds), or the time of the read where the kernel gave none.
    pub fn read_ns(&self) -> u64 {
        self.read_ns.get()
    }

    pub fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.tcp.peer_addr()
    }

    pub fn local_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        self.tcp.local_addr()
    }

    /// The socket's file descriptor (CLIENT LIST's `fd`).
    pub fn raw_fd(&self) -> i32 {
        use std::os::fd::AsRawFd as _;
        self.tcp.as_raw_fd()
    }

    pub fn set_nodelay(&self, on: bool) -> std::io::Result<()> {
        self.tcp.set_nodelay(on)
    }

    /// Reads what the client sent (at least one byte, or 0 at the end of the stream) into
    /// `buf`, with room for at least `want` more bytes made once input is there: a client
    /// that sends nothing holds no more buffer than it had (the cron may have taken it all
    /// back). Cancel-safe.
    pub async fn read_some(&self, buf: &mut BytesMut, want: usize) -> std::io::Result<usize> {
        let Some(tls) = &self.tls else {
            loop {
                self.tcp.readable().await?;
                let (read, spare) = if want <= STAMPED_READ_BYTES_MAX {
                    // Timed: through the thread's initialised buffer (one copy of what came).
                    let fd = self.tcp.as_raw_fd();
                    let read = STAMPED_READ_BUF.with(|scratch| {
                        let mut scratch = scratch.borrow_mut();
                        let (n, at) = self.tcp.try_io(tokio::io::Interest::READABLE, || {
                            recv_stamped(fd, &mut scratch, nix::sys::socket::MsgFlags::empty())
                        })?;
                        if n > 0 {
                            buf.reserve(want.max(n));
                            buf.extend_from_slice(scratch.get(..n).unwrap_or_default());
                            self.read_ns.set(at.unwrap_or_else(crate::time::wall_ns));
                        }
                        Ok(n)
                    });
                    (read, STAMPED_READ_BYTES_MAX)
                } else {
                    buf.reserve(want);
                    let spare = buf.capacity() - buf.len();
                    let read = self.tcp.try_read_buf(buf);
                    if matches!(read, Ok(n) if n > 0) {
                        self.read_ns.set(crate::time::wall_ns());
                    }
                    (read, spare)
                };
                match read {
                    Ok(n) if n > 0 && n < spare => {
                        // A short read took all the socket held: mark it not readable now,
                        // rather than learn it from one more recv answering EAGAIN (tokio
                        // clears readiness only then). Data arriving later is a new epoll
                        // event, which the reactor has not consumed while this task runs.
                        let _ = self.tcp.try_io(tokio::io::Interest::READABLE, || {
                            Err::<(), _>(would_block())
                        });
                        return Ok(n);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    r => return r,
                }
            }
        };
        loop {
            let progressed = {
                let mut s = tls.borrow_mut();
                if !s.input.is_empty() {
                    buf.reserve(want);
                    let n = s.input.len();
                    buf.extend_from_slice(&s.input);
                    s.input.clear();
                    return Ok(n);
                }
                // Records read with the handshake, or by an earlier pull, come first. Room is
                // made only for plaintext or an end to report, as for plain TCP.
                let state = s.process_state(self.io())?;
                if state.plaintext_bytes_to_read() > 0 || state.peer_has_closed() || s.eof {
                    buf.reserve(want);
                    if let Some(n) = s.take_plaintext(buf)? {
                        return Ok(n);
                    }
                }
                s.pull(self.io())?
            };
            if !progressed {
                self.tcp.readable().await?;
            }
        }
    }

    /// Writes some of `buf` without waiting: the bytes taken (never 0 for a non-empty
    /// `buf`), or WouldBlock. With TLS the session's pending ciphertext goes first; while
    /// the socket does not take it, no new plaintext is accepted.
    pub fn try_write(&self, buf: &[u8]) -> std::io::Result<usize> {
        let Some(tls) = &self.tls else {
            return self.tcp.try_write(buf);
        };
        tls.borrow_mut().write(self.io(), buf)
    }

    /// Writes the ciphertext the session still holds. Ok(true): nothing is pending (always,
    /// for plain TCP).
    pub fn try_flush(&self) -> std::io::Result<bool> {
        match &self.tls {
            None => Ok(true),
            Some(tls) => tls.borrow_mut().flush(self.io()),
        }
    }

    /// `try_flush` for the side path.
    pub fn flush_now(&self) -> std::io::Result<bool> {
        match &self.tls {
            None => Ok(true),
            Some(tls) => tls.borrow_mut().flush(self.raw_io()),
        }
    }

    /// Whether output the socket did not take waits in the session.
    pub fn has_pending_output(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|t| t.borrow().conn.wants_write())
    }

    /// Writes all of `bytes` (and any TLS output pending), waiting as needed.
    pub async fn write_all(&self, bytes: &[u8]) -> std::io::Result<()> {
        let mut written = 0;
        loop {
            let rest = bytes.get(written..).unwrap_or_default();
            let done = if rest.is_empty() {
                self.try_flush()?
            } else {
                match self.try_write(rest) {
                    Ok(n) => {
                        written += n;
                        continue;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
                    Err(e) => return Err(e),
                }
            };
            if done {
                return Ok(());
            }
            self.tcp.writable().await?;
        }
    }

    /// Waits until the socket may take more bytes. Cancel-safe.
    pub async fn writable(&self) -> std::io::Result<()> {
        self.tcp.writable().await
    }

    /// Ends the connection: TLS sends close_notify (if the socket takes it now), then the
    /// TCP write side is shut.
    pub async fn shutdown(&mut self) {
        if let Some(tls) = &self.tls {
            let mut s = tls.borrow_mut();
            s.conn.send_close_notify();
            let _ = s.flush(self.io());
        }
        let _ = self.tcp.shutdown().await;
    }

    /// Copies into `buf` what the client sent and nobody consumed, without waiting and
    /// without consuming it (the side path, `script::busy`). Returns the bytes copied.
    pub fn peek_now(&self, buf: &mut [u8]) -> usize {
        let Some(tls) = &self.tls else {
            return match rustix::net::recv(
                &self.tcp,
                buf,
                rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT,
            ) {
                Ok((n, _)) => n,
                Err(_) => 0,
            };
        };
        let mut s = tls.borrow_mut();
        let mut taken = std::mem::take(&mut s.input);
        while taken.len() < buf.len() {
            match s.take_plaintext(&mut taken) {
                Ok(Some(n)) if n > 0 => continue,
                Ok(Some(_)) | Err(_) => break,
                Ok(None) => {}
            }
            if !matches!(s.pull(self.raw_io()), Ok(true)) {
                break;
            }
        }
        let n = taken.len().min(buf.len());
        if let (Some(dst), Some(src)) = (buf.get_mut(..n), taken.get(..n)) {
            dst.copy_from_slice(src);
        }
        s.input = taken;
        n
    }

    /// Drops the first `n` bytes `peek_now` showed (the side path answered them).
    pub fn consume(&self, n: usize) {
        let Some(tls) = &self.tls else {
            let mut sink = vec![0u8; n];
            let mut taken = 0;
            while taken < n {
                match rustix::net::recv(
                    &self.tcp,
                    sink.get_mut(taken..n).unwrap_or_default(),
                    rustix::net::RecvFlags::DONTWAIT,
                ) {
                    Ok((k, _)) if k > 0 => taken += k,
                    _ => break,
                }
            }
            return;
        };
        let mut s = tls.borrow_mut();
        let n = n.min(s.input.len());
        s.input.advance(n);
    }

    /// Whether plaintext the side path peeked waits in the stream (its connection task must
    /// be woken to read it: the socket may show nothing more).
    pub fn has_buffered_input(&self) -> bool {
        self.tls
            .as_ref()
            .is_some_and(|t| !t.borrow().input.is_empty())
    }

    /// Writes what the socket takes of `bytes` now; returns how many it took.
    pub fn send_now(&self, bytes: &[u8]) -> usize {
        if self.tls.is_none() {
            let mut sent = 0;
            while sent < bytes.len() {
                match rustix::net::send(
                    &self.tcp,
                    bytes.get(sent..).unwrap_or_default(),
                    rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL,
                ) {
                    Ok(k) if k > 0 => sent += k,
                    _ => break,
                }
            }
            return sent;
        }
        let Some(tls) = &self.tls else {
            return 0;
        };
        let mut s = tls.borrow_mut();
        let mut sent = 0;
        while sent < bytes.len() {
            match s.write(self.raw_io(), bytes.get(sent..).unwrap_or_default()) {
                Ok(k) if k > 0 => sent += k,
                _ => break,
            }
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How long the input waits in the socket before it is read: a read timed by the kernel
    /// says it arrived at least this long before the read, one timed at the read does not.
    const WAIT_MS: u64 = 50;

    /// Reads `want` from a plain stream whose input was sent `WAIT_MS` before; returns the
    /// bytes read, when the read began and the time the stream records for the input.
    fn read_after_wait(want: usize) -> (usize, u64, u64) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
            let (tcp, _) = listener.accept().await.unwrap();
            let stream = ClientStream::plain(tcp);
            // The kernel turns receive timing on for the whole stack a moment after the first
            // socket asks (deferred work): input that came before is not timed.
            std::thread::sleep(std::time::Duration::from_millis(WAIT_MS));
            client.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
            std::thread::sleep(std::time::Duration::from_millis(WAIT_MS));
            let before = crate::time::wall_ns();
            let mut buf = BytesMut::new();
            let n = stream.read_some(&mut buf, want).await.unwrap();
            (n, before, stream.read_ns())
        })
    }

    /// Up to `STAMPED_READ_BYTES_MAX` of room asked, a read takes the kernel's receive time;
    /// one byte more, the time of the read.
    #[test]
    fn reads_carry_the_kernels_receive_time_up_to_the_limit() {
        let (n, before, at) = read_after_wait(STAMPED_READ_BYTES_MAX);
        assert_eq!(n, 14);
        assert!(
            at + (WAIT_MS - 10) * 1_000_000 <= before,
            "received at {at}, read from {before}"
        );
        let (n, before, at) = read_after_wait(STAMPED_READ_BYTES_MAX + 1);
        assert_eq!(n, 14);
        assert!(at >= before, "timed at {at}, read from {before}");
    }
}
