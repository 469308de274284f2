//! A relay pipe as a UDP socket for quinn: [`PipeSocket`] sends each QUIC
//! packet as one length-prefixed frame on a relay stream and receives the
//! frames the other end sent, so a whole normal amos connection — its own
//! TLS, keys and session — runs inside the pipe (docs/design.md §7.11).
//!
//! Frames: a `u16` big-endian length (1..=[`MAX_PACKET`]), then the
//! packet. The relay forwards the bytes as they come; it can drop, alter
//! or reorder them, and the QUIC connection inside, authenticated end to
//! end, drops what does not decrypt — so the worst a relay does is fail a
//! session.
//!
//! Must never interpret a packet, and never block: a packet that finds the
//! outgoing queue full is dropped, as a full UDP socket buffer would drop
//! it, and QUIC's loss recovery sends it again.

use std::fmt;
use std::io::{self, IoSliceMut};
use std::net::{Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use quinn::udp::{RecvMeta, Transmit};
use quinn::{AsyncUdpSocket, RecvStream, SendStream, UdpPoller};
use tokio::sync::{Notify, mpsc};

/// The largest packet a pipe frame carries.
pub(crate) const MAX_PACKET: usize = u16::MAX as usize;
/// Packets queued each way between the socket and its stream.
const QUEUE: usize = 256;

/// The address a pipe's far end has for quinn (RFC 6666's discard-only
/// prefix: it names no host; a session through a pipe learns no address
/// from it, docs/design.md §7.5).
pub(crate) fn far_addr() -> SocketAddr {
    SocketAddr::new(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 1).into(), 1)
}

fn near_addr() -> SocketAddr {
    SocketAddr::new(Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 2).into(), 1)
}

/// quinn's socket over one relay stream.
pub(crate) struct PipeSocket {
    out: mpsc::Sender<Vec<u8>>,
    inbox: Mutex<mpsc::Receiver<Vec<u8>>>,
}

impl fmt::Debug for PipeSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipeSocket").finish_non_exhaustive()
    }
}

impl PipeSocket {
    /// A socket over the stream `send`/`recv`; two tasks carry its frames
    /// until either side is done (the socket dropped, the stream ended).
    /// The [`Notify`] is told once nothing more can come from the far end
    /// (the relay or the far end closed the pipe): the owner closes its
    /// endpoint then, so the connection inside fails at once rather than by
    /// its idle timeout. Call inside a tokio runtime.
    pub(crate) fn new(send: SendStream, recv: RecvStream) -> (Arc<PipeSocket>, Arc<Notify>) {
        let (out, out_rx) = mpsc::channel(QUEUE);
        let (in_tx, inbox) = mpsc::channel(QUEUE);
        let ended = Arc::new(Notify::new());
        tokio::spawn(pump_out(out_rx, send));
        tokio::spawn(pump_in(recv, in_tx, ended.clone()));
        let socket = Arc::new(PipeSocket {
            out,
            inbox: Mutex::new(inbox),
        });
        (socket, ended)
    }

    fn queue(&self, packet: &[u8]) {
        if packet.is_empty() || packet.len() > MAX_PACKET {
            return;
        }
        // Full: dropped, as by a full socket buffer. Closed: the pipe is
        // gone, and the packet with it — never an error, which would stop
        // quinn's driver and with it every timer of the connection.
        let _ = self.out.try_send(packet.to_vec());
    }
}

/// Writes queued packets as frames; finishes the stream when the socket is
/// gone.
async fn pump_out(mut rx: mpsc::Receiver<Vec<u8>>, mut send: SendStream) {
    let mut buf = Vec::with_capacity(64 * 1024);
    while let Some(packet) = rx.recv().await {
        buf.clear();
        frame(&mut buf, &packet);
        // Whatever else is queued goes in the same write.
        while buf.len() < 60 * 1024 {
            match rx.try_recv() {
                Ok(p) => frame(&mut buf, &p),
                Err(_) => break,
            }
        }
        if send.write_all(&buf).await.is_err() {
            return;
        }
    }
    let _ = send.finish();
}

fn frame(buf: &mut Vec<u8>, packet: &[u8]) {
    // queue() let through only 1..=MAX_PACKET bytes.
    buf.extend_from_slice(&(packet.len() as u16).to_be_bytes());
    buf.extend_from_slice(packet);
}

/// Reads frames and hands their packets to the socket; stops at the end of
/// the stream, a zero length, or when the socket is gone, and then says so.
async fn pump_in(recv: RecvStream, tx: mpsc::Sender<Vec<u8>>, ended: Arc<Notify>) {
    read_frames(recv, tx).await;
    ended.notify_one();
}

async fn read_frames(mut recv: RecvStream, tx: mpsc::Sender<Vec<u8>>) {
    loop {
        let mut len = [0u8; 2];
        if recv.read_exact(&mut len).await.is_err() {
            return;
        }
        let n = usize::from(u16::from_be_bytes(len));
        if n == 0 {
            return;
        }
        let mut packet = vec![0; n];
        if recv.read_exact(&mut packet).await.is_err() {
            return;
        }
        // Waiting here holds the stream back: backpressure to the relay.
        if tx.send(packet).await.is_err() {
            return;
        }
    }
}

/// A pipe is always writable: a full queue drops (see [`PipeSocket`]).
#[derive(Debug)]
struct Writable;

impl UdpPoller for Writable {
    fn poll_writable(self: Pin<&mut Self>, _cx: &mut Context) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl AsyncUdpSocket for PipeSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable)
    }

    fn try_send(&self, transmit: &Transmit) -> io::Result<()> {
        match transmit.segment_size {
            Some(size) if size > 0 => transmit.contents.chunks(size).for_each(|p| self.queue(p)),
            _ => self.queue(transmit.contents),
        }
        Ok(())
    }

    fn poll_recv(
        &self,
        cx: &mut Context,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        let Ok(mut inbox) = self.inbox.lock() else {
            return Poll::Ready(Err(io::Error::other("the pipe's inbox is poisoned")));
        };
        let mut n = 0;
        while n < bufs.len().min(meta.len()) {
            let packet = if n == 0 {
                match inbox.poll_recv(cx) {
                    Poll::Ready(Some(p)) => p,
                    // The pipe ended: nothing more will come; the connection
                    // inside ends by its own close or idle timeout.
                    Poll::Ready(None) | Poll::Pending => return Poll::Pending,
                }
            } else {
                match inbox.try_recv() {
                    Ok(p) => p,
                    Err(_) => break,
                }
            };
            let len = packet.len().min(bufs[n].len());
            bufs[n][..len].copy_from_slice(&packet[..len]);
            meta[n] = RecvMeta {
                addr: far_addr(),
                len,
                stride: len,
                ecn: None,
                dst_ip: None,
            };
            n += 1;
        }
        Poll::Ready(Ok(n))
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(near_addr())
    }

    fn may_fragment(&self) -> bool {
        false
    }
}
