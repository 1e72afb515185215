//! A minimal NBD server (the protocol qemu-img speaks natively) on a Unix socket, so that
//! qemu-img can read a disk straight off the datastore and write a raw image straight into the
//! upload, with no local copy on either side.
//!
//! Two exports:
//! * a **source**: read-only, served from a [`CachedDisk`] (HTTP ranges, zeros made locally);
//! * a **sink**: write-only, in order. `qemu-img convert -n --target-is-zero` (without `-W`)
//!   writes its target strictly in ascending offsets and skips zero areas, so the sink turns the
//!   writes (and the gaps between them, as zeros) into a stream of fixed-size parts.
//!
//! Only what qemu-img needs of the protocol (NBD's `doc/proto.md`): fixed newstyle handshake,
//! `NBD_OPT_GO`/`INFO`/`EXPORT_NAME`, simple replies; every other option is refused with
//! `NBD_REP_ERR_UNSUP`, which clients fall back from. A hand-written server rather than a crate:
//! the Rust NBD crates are synchronous over `Read + Seek` and serve neither an asynchronous
//! source nor an append-only sink.

use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Semaphore, mpsc};

use super::remote::CachedDisk;

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const FLAG_C_NO_ZEROES: u32 = 2;

const OPT_EXPORT_NAME: u32 = 1;
const OPT_ABORT: u32 = 2;
const OPT_INFO: u32 = 6;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
const REP_ERR_INVALID: u32 = (1 << 31) + 3;
const INFO_EXPORT: u16 = 0;

const TFLAG_HAS_FLAGS: u16 = 1 << 0;
const TFLAG_READ_ONLY: u16 = 1 << 1;
const TFLAG_SEND_FLUSH: u16 = 1 << 2;
const TFLAG_SEND_TRIM: u16 = 1 << 5;
const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;
const CMD_TRIM: u16 = 4;
const CMD_WRITE_ZEROES: u16 = 6;

const EPERM: u32 = 1;
const EIO: u32 = 5;
const EINVAL: u32 = 22;
const ENOSPC: u32 = 28;

/// Largest request accepted (qemu's own limit is 32 MiB).
const MAX_REQUEST: u32 = 32 << 20;
/// Reads served at once per connection.
const READS_IN_FLIGHT: usize = 16;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// `nbd+unix:///?socket=PATH` for qemu, the path percent-encoded.
pub fn uri(socket: &Path) -> String {
    let mut q = String::new();
    for b in socket.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.".contains(b) {
            q.push(char::from(*b));
        } else {
            q.push_str(&format!("%{b:02X}"));
        }
    }
    format!("nbd+unix:///?socket={q}")
}

async fn reply_opt(s: &mut UnixStream, opt: u32, kind: u32, data: &[u8]) -> io::Result<()> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&u32::try_from(data.len()).unwrap_or(0).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).await
}

/// The fixed-newstyle handshake; `Ok(true)` when transmission begins, `Ok(false)` when the
/// client went away (or aborted) first.
async fn handshake(s: &mut UnixStream, size: u64, flags: u16) -> io::Result<bool> {
    let mut hello = Vec::with_capacity(18);
    hello.extend_from_slice(&NBDMAGIC.to_be_bytes());
    hello.extend_from_slice(&IHAVEOPT.to_be_bytes());
    hello.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    s.write_all(&hello).await?;
    let client_flags = s.read_u32().await?;
    let no_zeroes = client_flags & FLAG_C_NO_ZEROES != 0;
    let mut export = Vec::with_capacity(12);
    export.extend_from_slice(&INFO_EXPORT.to_be_bytes());
    export.extend_from_slice(&size.to_be_bytes());
    export.extend_from_slice(&flags.to_be_bytes());
    loop {
        let magic = match s.read_u64().await {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(false),
            Err(e) => return Err(e),
        };
        if magic != IHAVEOPT {
            return Err(bad("NBD option without IHAVEOPT"));
        }
        let opt = s.read_u32().await?;
        let len = s.read_u32().await?;
        if len > 64 << 10 {
            return Err(bad(format!("NBD option {opt} of {len} bytes")));
        }
        let mut data = vec![0u8; len as usize];
        s.read_exact(&mut data).await?;
        match opt {
            OPT_EXPORT_NAME => {
                let mut b = Vec::with_capacity(134);
                b.extend_from_slice(&size.to_be_bytes());
                b.extend_from_slice(&flags.to_be_bytes());
                if !no_zeroes {
                    b.extend_from_slice(&[0u8; 124]);
                }
                s.write_all(&b).await?;
                return Ok(true);
            }
            OPT_ABORT => {
                let _ = reply_opt(s, opt, REP_ACK, &[]).await;
                return Ok(false);
            }
            OPT_INFO | OPT_GO => {
                // u32 name length, name, u16 count, u16 requests: any name is this export.
                if data.len() < 6 {
                    reply_opt(s, opt, REP_ERR_INVALID, &[]).await?;
                    continue;
                }
                reply_opt(s, opt, REP_INFO, &export).await?;
                reply_opt(s, opt, REP_ACK, &[]).await?;
                if opt == OPT_GO {
                    return Ok(true);
                }
            }
            _ => reply_opt(s, opt, REP_ERR_UNSUP, &[]).await?,
        }
    }
}

/// One request's header.
struct Request {
    kind: u16,
    cookie: u64,
    offset: u64,
    len: u32,
}

async fn read_request(r: &mut (impl AsyncReadExt + Unpin)) -> io::Result<Option<Request>> {
    let mut h = [0u8; 28];
    match r.read_exact(&mut h).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let be32 = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let be64 = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[i..i + 8]);
        u64::from_be_bytes(b)
    };
    if be32(0) != REQUEST_MAGIC {
        return Err(bad("bad NBD request magic"));
    }
    Ok(Some(Request {
        kind: u16::from_be_bytes([h[6], h[7]]),
        cookie: be64(8),
        offset: be64(16),
        len: be32(24),
    }))
}

fn reply_header(error: u32, cookie: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// Serves `disk` read-only to every client that connects, until the task is dropped.
pub async fn serve_source(listener: UnixListener, disk: Arc<CachedDisk>) -> io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let disk = disk.clone();
        tokio::spawn(async move {
            if let Err(e) = source_connection(stream, disk).await {
                tracing::debug!(error = %e, "NBD source connection ended");
            }
        });
    }
}

async fn source_connection(mut stream: UnixStream, disk: Arc<CachedDisk>) -> io::Result<()> {
    let size = disk.size();
    let flags = TFLAG_HAS_FLAGS | TFLAG_READ_ONLY | TFLAG_SEND_FLUSH | TFLAG_CAN_MULTI_CONN;
    if !handshake(&mut stream, size, flags).await? {
        return Ok(());
    }
    let (mut rd, mut wr) = stream.into_split();
    let (tx, mut rx) = mpsc::channel::<(u32, u64, Bytes)>(READS_IN_FLIGHT);
    let writer = tokio::spawn(async move {
        while let Some((err, cookie, data)) = rx.recv().await {
            wr.write_all(&reply_header(err, cookie)).await?;
            if err == 0 && !data.is_empty() {
                wr.write_all(&data).await?;
            }
        }
        io::Result::Ok(())
    });
    let slots = Arc::new(Semaphore::new(READS_IN_FLIGHT));
    while let Some(req) = read_request(&mut rd).await? {
        match req.kind {
            CMD_READ => {
                let end = req.offset.checked_add(u64::from(req.len));
                if req.len > MAX_REQUEST || end.is_none_or(|e| e > size) {
                    let _ = tx.send((EINVAL, req.cookie, Bytes::new())).await;
                    continue;
                }
                let permit = slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|_| bad("closed"))?;
                let (disk, tx) = (disk.clone(), tx.clone());
                tokio::spawn(async move {
                    let reply = match disk.read(req.offset, u64::from(req.len)).await {
                        Ok(b) if b.len() == req.len as usize => (0, req.cookie, b),
                        Ok(_) => (EIO, req.cookie, Bytes::new()),
                        Err(e) => {
                            tracing::warn!(error = %e, offset = req.offset, "NBD source read failed");
                            (EIO, req.cookie, Bytes::new())
                        }
                    };
                    let _ = tx.send(reply).await;
                    drop(permit);
                });
            }
            CMD_DISC => break,
            CMD_FLUSH => {
                let _ = tx.send((0, req.cookie, Bytes::new())).await;
            }
            CMD_WRITE => {
                // Drain the payload, then refuse.
                let mut skip = vec![0u8; req.len.min(MAX_REQUEST) as usize];
                rd.read_exact(&mut skip).await?;
                let _ = tx.send((EPERM, req.cookie, Bytes::new())).await;
            }
            _ => {
                let _ = tx.send((EINVAL, req.cookie, Bytes::new())).await;
            }
        }
    }
    drop(tx);
    writer.await.map_err(|e| bad(e.to_string()))?
}

/// Turns in-order writes and zero runs into parts of exactly `part` bytes (the last may be
/// shorter), sent on `tx` (bounded: a slow upload holds the writer back).
pub struct Assembler {
    part: usize,
    size: u64,
    pos: u64,
    buf: BytesMut,
    zero: Bytes,
    tx: mpsc::Sender<Bytes>,
}

impl Assembler {
    pub fn new(part: usize, size: u64, tx: mpsc::Sender<Bytes>) -> Self {
        Self {
            part,
            size,
            pos: 0,
            buf: BytesMut::with_capacity(part),
            zero: Bytes::from(vec![0u8; part]),
            tx,
        }
    }

    async fn emit(&mut self) -> io::Result<()> {
        let full = std::mem::replace(&mut self.buf, BytesMut::with_capacity(self.part));
        self.tx
            .send(full.freeze())
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "upload stopped"))
    }

    /// `n` zero bytes.
    pub async fn zeros(&mut self, mut n: u64) -> io::Result<()> {
        while n > 0 {
            if self.buf.is_empty() && n >= self.part as u64 {
                self.tx
                    .send(self.zero.clone())
                    .await
                    .map_err(|_| io::Error::new(io::ErrorKind::BrokenPipe, "upload stopped"))?;
                n -= self.part as u64;
                self.pos += self.part as u64;
                continue;
            }
            let room = (self.part - self.buf.len()) as u64;
            let k = n.min(room);
            self.buf.resize(self.buf.len() + k as usize, 0);
            n -= k;
            self.pos += k;
            if self.buf.len() == self.part {
                self.emit().await?;
            }
        }
        Ok(())
    }

    /// Bytes at the current position.
    pub async fn data(&mut self, mut d: &[u8]) -> io::Result<()> {
        while !d.is_empty() {
            let k = d.len().min(self.part - self.buf.len());
            self.buf.extend_from_slice(&d[..k]);
            d = &d[k..];
            self.pos += k as u64;
            if self.buf.len() == self.part {
                self.emit().await?;
            }
        }
        Ok(())
    }

    /// Places `len` bytes (data when given, zeros otherwise) at `offset`: the gap before it is
    /// zeros; going back is an error.
    async fn place(&mut self, offset: u64, len: u64, data: Option<&[u8]>) -> Result<(), u32> {
        if offset < self.pos {
            tracing::warn!(offset, at = self.pos, "NBD sink: a write went backwards");
            return Err(EINVAL);
        }
        if offset.saturating_add(len) > self.size {
            return Err(ENOSPC);
        }
        let gap = offset - self.pos;
        let r = async {
            self.zeros(gap).await?;
            match data {
                Some(d) => self.data(d).await,
                None => self.zeros(len).await,
            }
        }
        .await;
        r.map_err(|_| EIO)
    }

    /// Pads with zeros to the image's size and sends the last part.
    pub async fn finish(mut self) -> io::Result<()> {
        let rest = self.size - self.pos;
        self.zeros(rest).await?;
        if !self.buf.is_empty() {
            self.emit().await?;
        }
        Ok(())
    }
}

/// Serves a write-only export of `size` bytes to qemu-img until it disconnects, feeding the
/// assembler; then pads and closes it. One connection at a time, writes handled in order.
pub async fn serve_sink(listener: UnixListener, mut asm: Assembler) -> io::Result<()> {
    let size = asm.size;
    let flags = TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH | TFLAG_SEND_TRIM | TFLAG_SEND_WRITE_ZEROES;
    loop {
        let (mut stream, _) = listener.accept().await?;
        if !handshake(&mut stream, size, flags).await? {
            continue;
        }
        let mut wrote = false;
        let mut payload = vec![0u8; 0];
        while let Some(req) = read_request(&mut stream).await? {
            let err = match req.kind {
                CMD_WRITE => {
                    if req.len > MAX_REQUEST {
                        return Err(bad(format!("NBD write of {} bytes", req.len)));
                    }
                    payload.resize(req.len as usize, 0);
                    stream.read_exact(&mut payload).await?;
                    wrote = true;
                    asm.place(req.offset, u64::from(req.len), Some(&payload))
                        .await
                        .err()
                        .unwrap_or(0)
                }
                CMD_WRITE_ZEROES | CMD_TRIM => {
                    wrote = true;
                    asm.place(req.offset, u64::from(req.len), None)
                        .await
                        .err()
                        .unwrap_or(0)
                }
                CMD_FLUSH => 0,
                CMD_DISC => break,
                _ => EINVAL,
            };
            stream.write_all(&reply_header(err, req.cookie)).await?;
        }
        if wrote {
            return asm.finish().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_assembler_cuts_writes_and_gaps_into_full_parts() {
        let (tx, mut rx) = mpsc::channel(64);
        let mut a = Assembler::new(4, 14, tx);
        a.place(1, 2, Some(b"ab")).await.unwrap();
        a.place(3, 1, None).await.unwrap();
        a.place(9, 3, Some(b"xyz")).await.unwrap();
        assert_eq!(a.place(2, 1, Some(b"!")).await, Err(EINVAL), "backwards");
        assert_eq!(a.place(13, 2, None).await, Err(ENOSPC), "past the end");
        a.finish().await.unwrap();
        let mut parts = vec![];
        while let Some(p) = rx.recv().await {
            parts.push(p.to_vec());
        }
        assert_eq!(
            parts,
            vec![
                b"\0ab\0".to_vec(),
                vec![0; 4],
                b"\0xyz".to_vec(),
                vec![0; 2]
            ]
        );
    }

    #[test]
    fn socket_paths_are_escaped_in_the_uri() {
        assert_eq!(
            uri(Path::new("/tmp/a b/s.sock")),
            "nbd+unix:///?socket=/tmp/a%20b/s.sock"
        );
    }
}
