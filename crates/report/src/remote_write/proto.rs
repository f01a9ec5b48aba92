//! The wire format of Prometheus remote write 1.0: the protobuf messages of
//! `prometheus/prompb/remote.proto` and `types.proto` that a push of plain samples needs
//! (`WriteRequest`, `TimeSeries`, `Label`, `Sample`; no exemplars, native histograms or
//! metadata), serialized and then compressed as one snappy *block* (the raw format, not the
//! framed stream format), as the specification requires.
//!
//! Source: the Prometheus Remote-Write 1.0 specification
//! (<https://prometheus.io/docs/specs/prw/remote_write_spec/>): field numbers below are the
//! `.proto` files' own; label names of a series must be sorted and unique, samples of a series in
//! time order.

/// `prometheus.WriteRequest`: the body of one push.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WriteRequest {
    /// Series with their samples.
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

/// `prometheus.TimeSeries`: one label set and its samples, oldest first.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TimeSeries {
    /// Labels sorted by name, `__name__` (the metric name) among them.
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    /// Samples in ascending timestamp order.
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

/// `prometheus.Label`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct Label {
    /// Label name (`[a-zA-Z_][a-zA-Z0-9_]*`).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Label value (any UTF-8).
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `prometheus.Sample`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Sample {
    /// The value.
    #[prost(double, tag = "1")]
    pub value: f64,
    /// Unix time in milliseconds.
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

/// The body of a push: `req` serialized and compressed as a snappy block.
pub fn encode(req: &WriteRequest) -> Vec<u8> {
    let raw = prost::Message::encode_to_vec(req);
    // Compressing a byte slice fails only for inputs above snappy's 2^32 − 1 limit; a push is
    // split far below it (see `MAX_SAMPLES_PER_REQUEST`).
    snap::raw::Encoder::new()
        .compress_vec(&raw)
        .expect("a remote-write body is far below snappy's 4 GiB block limit")
}

/// A body that is not a snappy-compressed `WriteRequest`.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not a valid snappy block.
    #[error("not a snappy block: {0}")]
    Snappy(#[from] snap::Error),
    /// Decompressed, but not a `WriteRequest`.
    #[error("not a remote-write WriteRequest: {0}")]
    Protobuf(#[from] prost::DecodeError),
}

/// The `WriteRequest` in a push body ([`encode`]'s inverse; what a receiver does).
///
/// # Errors
/// [`DecodeError`] when `body` is not a snappy block or not a `WriteRequest`.
pub fn decode(body: &[u8]) -> Result<WriteRequest, DecodeError> {
    let raw = snap::raw::Decoder::new().decompress_vec(body)?;
    Ok(prost::Message::decode(raw.as_slice())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up() -> WriteRequest {
        WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: "up".into(),
                }],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 1000,
                }],
            }],
        }
    }

    /// `up 1 @1000 ms`, laid out by hand from the protobuf encoding rules: a tag byte is
    /// `field << 3 | wire type` (2 = length-delimited, 1 = 64-bit, 0 = varint).
    const UP_BYTES: [u8; 32] = [
        0x0a, 30, // WriteRequest.timeseries (1, len), 30 bytes
        0x0a, 14, // TimeSeries.labels (1, len), 14 bytes
        0x0a, 8, b'_', b'_', b'n', b'a', b'm', b'e', b'_', b'_', // Label.name
        0x12, 2, b'u', b'p', // Label.value
        0x12, 12, // TimeSeries.samples (2, len), 12 bytes
        0x09, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, // Sample.value (1, 64-bit): 1.0, little-endian
        0x10, 0xe8, 0x07, // Sample.timestamp (2, varint): 1000
    ];

    #[test]
    fn the_protobuf_layout_is_the_specified_one() {
        assert_eq!(prost::Message::encode_to_vec(&up()), UP_BYTES);
    }

    #[test]
    fn a_snappy_block_of_literals_decodes() {
        // A snappy block by hand: the uncompressed length as a varint (32), then one literal
        // whose tag byte is (length − 1) << 2 with element type 00; no frame header or CRC (that
        // is the stream format, which remote write does not use).
        let mut block = vec![32, 31 << 2];
        block.extend_from_slice(&UP_BYTES);
        assert_eq!(decode(&block).unwrap(), up());
    }

    #[test]
    fn what_is_encoded_decodes_to_itself() {
        let mut req = up();
        req.timeseries.push(TimeSeries {
            labels: vec![
                Label {
                    name: "__name__".into(),
                    value: "headroom_sweep_level_objective_value".into(),
                },
                Label {
                    name: "phase".into(),
                    value: "chat ünïcode".into(),
                },
            ],
            samples: vec![
                Sample {
                    value: 0.25,
                    timestamp: 1_796_158_352_826,
                },
                Sample {
                    value: f64::INFINITY,
                    timestamp: 1_796_158_362_826,
                },
            ],
        });
        let body = encode(&req);
        assert_eq!(decode(&body).unwrap(), req);
        // A snappy block starts with the uncompressed length, so this is no framed stream
        // (whose first byte is the 0xff stream identifier chunk).
        let raw_len = prost::Message::encoded_len(&req);
        assert_eq!(usize::from(body[0] & 0x7f), raw_len % 128);
        assert!(decode(&body[..body.len() - 1]).is_err());
    }
}
