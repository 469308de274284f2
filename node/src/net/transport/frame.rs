//! Length-prefixed frames: a `u32` big-endian length, then that many bytes.
//!
//! The length is checked against the limit before anything is allocated,
//! and the body buffer grows only as bytes actually arrive, so a peer that
//! announces a large frame and sends nothing costs nothing. A zero-length
//! frame is an error (no message encodes to nothing). Timeouts are the
//! caller's: wrap calls in [`super::with_timeout`].
//!
//! Works over any tokio `AsyncRead`/`AsyncWrite`, in particular quinn's
//! `RecvStream`/`SendStream`; quinn's stream errors are mapped back to the
//! connection's cause (e.g. a refused handshake reads as
//! [`TransportError::Refused`]).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::TransportError;
use super::error::from_stream_io;

/// The largest frame accepted or sent: 16 MiB.
pub const MAX_FRAME: usize = 16 * 1024 * 1024;

/// How much of a frame's body is reserved up front; the rest grows as it arrives.
const INITIAL_CAPACITY: usize = 64 * 1024;

/// Write one frame. Fails without writing anything if `payload` is empty or
/// longer than [`MAX_FRAME`]. Does not finish the stream.
pub async fn write_frame<W>(writer: &mut W, payload: &[u8]) -> Result<(), TransportError>
where
    W: AsyncWrite + Unpin + ?Sized,
{
    if payload.is_empty() {
        return Err(TransportError::Protocol(
            "refusing to send an empty frame".into(),
        ));
    }
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|&len| len as usize <= MAX_FRAME)
        .ok_or(TransportError::FrameTooLarge {
            len: payload.len() as u64,
            max: MAX_FRAME,
        })?;
    writer
        .write_all(&len.to_be_bytes())
        .await
        .map_err(from_stream_io)?;
    writer.write_all(payload).await.map_err(from_stream_io)?;
    Ok(())
}

/// Read one frame of at most [`MAX_FRAME`] bytes.
///
/// `Ok(None)`: the stream ended cleanly at a frame boundary. A stream that
/// ends inside a frame, a zero length, or a length over the limit is an
/// error; on [`TransportError::FrameTooLarge`] exactly the 4 length bytes
/// were consumed.
pub async fn read_frame<R>(reader: &mut R) -> Result<Option<Vec<u8>>, TransportError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    read_frame_with_limit(reader, MAX_FRAME).await
}

/// [`read_frame`] with a smaller limit (capped at [`MAX_FRAME`]).
pub async fn read_frame_with_limit<R>(
    reader: &mut R,
    limit: usize,
) -> Result<Option<Vec<u8>>, TransportError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let limit = limit.min(MAX_FRAME);
    let mut prefix = [0u8; 4];
    let mut filled = 0;
    while filled < prefix.len() {
        let n = reader
            .read(&mut prefix[filled..])
            .await
            .map_err(from_stream_io)?;
        if n == 0 {
            return if filled == 0 {
                Ok(None)
            } else {
                Err(TransportError::Protocol(format!(
                    "stream ended inside a frame's length prefix ({filled} of 4 bytes)"
                )))
            };
        }
        filled += n;
    }
    let len = u32::from_be_bytes(prefix);
    if len == 0 {
        return Err(TransportError::Protocol("empty frame".into()));
    }
    let len = len as usize;
    if len > limit {
        return Err(TransportError::FrameTooLarge {
            len: len as u64,
            max: limit,
        });
    }
    let mut body = Vec::with_capacity(len.min(INITIAL_CAPACITY));
    let got = (&mut *reader)
        .take(len as u64)
        .read_to_end(&mut body)
        .await
        .map_err(from_stream_io)?;
    if got < len {
        return Err(TransportError::Protocol(format!(
            "stream ended inside a frame ({got} of {len} bytes)"
        )));
    }
    Ok(Some(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(len: u32, body: &[u8]) -> Vec<u8> {
        let mut v = len.to_be_bytes().to_vec();
        v.extend_from_slice(body);
        v
    }

    #[tokio::test]
    async fn frames_round_trip_in_order() {
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let big = vec![0xabu8; 300_000];
        let writer = async {
            write_frame(&mut a, b"one").await.unwrap();
            write_frame(&mut a, &big).await.unwrap();
            drop(a);
        };
        let reader = async {
            let first = read_frame(&mut b).await.unwrap();
            let second = read_frame(&mut b).await.unwrap();
            let end = read_frame(&mut b).await.unwrap();
            (first, second, end)
        };
        let ((), (first, second, end)) = tokio::join!(writer, reader);
        assert_eq!(first.as_deref(), Some(&b"one"[..]));
        assert_eq!(second.as_deref(), Some(big.as_slice()));
        assert_eq!(end, None);
    }

    #[tokio::test]
    async fn oversize_length_is_refused_after_reading_only_the_prefix() {
        let bytes = framed(MAX_FRAME as u32 + 1, b"rest");
        let mut input: &[u8] = &bytes;
        let err = read_frame(&mut input).await.unwrap_err();
        assert!(
            matches!(err, TransportError::FrameTooLarge { len, max } if len == MAX_FRAME as u64 + 1 && max == MAX_FRAME),
            "{err:?}"
        );
        assert_eq!(input, b"rest", "only the 4-byte prefix may be consumed");

        let bytes = framed(u32::MAX, b"");
        let mut input: &[u8] = &bytes;
        assert!(matches!(
            read_frame(&mut input).await,
            Err(TransportError::FrameTooLarge { .. })
        ));
    }

    #[tokio::test]
    async fn a_smaller_limit_applies() {
        let bytes = framed(11, b"hello world");
        let mut input: &[u8] = &bytes;
        assert!(matches!(
            read_frame_with_limit(&mut input, 10).await,
            Err(TransportError::FrameTooLarge { len: 11, max: 10 })
        ));
        let mut input: &[u8] = &bytes;
        assert_eq!(
            read_frame_with_limit(&mut input, 11)
                .await
                .unwrap()
                .as_deref(),
            Some(&b"hello world"[..])
        );
    }

    #[tokio::test]
    async fn malformed_input_is_an_error_not_a_panic() {
        // zero length
        let mut input: &[u8] = &[0, 0, 0, 0, 1];
        assert!(matches!(
            read_frame(&mut input).await,
            Err(TransportError::Protocol(_))
        ));
        // truncated prefix
        let mut input: &[u8] = &[0, 0];
        assert!(matches!(
            read_frame(&mut input).await,
            Err(TransportError::Protocol(_))
        ));
        // truncated body
        let bytes = framed(10, b"abc");
        let mut input: &[u8] = &bytes;
        assert!(matches!(
            read_frame(&mut input).await,
            Err(TransportError::Protocol(_))
        ));
        // empty input is a clean end
        let mut input: &[u8] = &[];
        assert_eq!(read_frame(&mut input).await.unwrap(), None);
    }

    #[tokio::test]
    async fn writer_refuses_empty_and_oversize_frames_without_writing() {
        let mut out = Vec::new();
        assert!(matches!(
            write_frame(&mut out, b"").await,
            Err(TransportError::Protocol(_))
        ));
        let huge = vec![0u8; MAX_FRAME + 1];
        assert!(matches!(
            write_frame(&mut out, &huge).await,
            Err(TransportError::FrameTooLarge { .. })
        ));
        assert!(out.is_empty());
        let exact = vec![1u8; MAX_FRAME];
        write_frame(&mut out, &exact).await.unwrap();
        assert_eq!(out.len(), MAX_FRAME + 4);
    }
}
