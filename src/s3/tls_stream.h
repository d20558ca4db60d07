// TlsStream: TLS over a Beast TCP stream, OpenSSL driven directly, for both ends of an S3
// connection (the server's HTTPS listener and the client library).
//
// Asio's ssl::stream moves one record (at most 17 KiB) per system call each way: a 2 MiB body
// costs 128 sends, 128 wake-ups of the reader and 128 reads. This stream instead encrypts a
// whole write (up to kMaxPlaintextPerWrite) into one ciphertext buffer and sends it with one
// call, and reads as much ciphertext as the socket holds (up to the input buffer) per call,
// handing OpenSSL records from memory. Bytes are encrypted and decrypted once each, as before;
// docs/decisions.md, "TLS: records batched per system call", has the measurements.
//
// A Beast SyncStream and AsyncStream (read_some/write_some and their async forms, any
// completion token), with `next_layer()` so beast::get_lowest_layer reaches the TCP stream and
// its timeouts. Errors: OpenSSL's in Asio's ssl category (a certificate that does not verify
// among them); the peer's close without close_notify is asio::ssl::error::stream_truncated,
// with close_notify asio::error::eof. One operation each way at a time, as for every stream.
#pragma once

#include <boost/asio/async_result.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

typedef struct ssl_st SSL;

namespace objectcache::s3 {

class TlsStream {
 public:
  using next_layer_type = boost::beast::tcp_stream;
  using executor_type = next_layer_type::executor_type;
  using error_code = boost::system::error_code;

  // Plaintext encrypted by one write_some; the ciphertext buffer holds at most this plus the
  // records' overhead (22 bytes per 16 KiB record in TLS 1.3).
  static constexpr size_t kMaxPlaintextPerWrite = 256 << 10;

  // `input_bytes`: the most ciphertext read from the socket per call (the buffer's size).
  TlsStream(next_layer_type next, boost::asio::ssl::context& context,
            size_t input_bytes = 64 << 10);
  TlsStream(TlsStream&&) noexcept;
  TlsStream& operator=(TlsStream&&) = delete;
  ~TlsStream();

  next_layer_type& next_layer() { return next_; }
  executor_type get_executor() { return next_.get_executor(); }
  SSL* native_handle();

  // ---- synchronous -------------------------------------------------------------------------
  void handshake(boost::asio::ssl::stream_base::handshake_type type, error_code& ec) {
    RunSync([&](error_code& e) { return HandshakeStep(type, e); }, ec);
  }
  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers, error_code& ec) {
    const boost::asio::mutable_buffer b = FirstNonEmpty(buffers);
    size_t n = 0;
    RunSync([&](error_code& e) { return ReadStep(b.data(), b.size(), &n, e); }, ec);
    return n;
  }
  template <typename ConstBuffers>
  size_t write_some(const ConstBuffers& buffers, error_code& ec) {
    size_t n = 0;
    RunSync([&](error_code& e) { return EncryptAll(buffers, &n, e); }, ec);
    return n;
  }
  template <typename MutableBuffers>
  size_t read_some(const MutableBuffers& buffers) {
    return OrThrow([&](error_code& ec) { return read_some(buffers, ec); });
  }
  template <typename ConstBuffers>
  size_t write_some(const ConstBuffers& buffers) {
    return OrThrow([&](error_code& ec) { return write_some(buffers, ec); });
  }

  // ---- asynchronous ------------------------------------------------------------------------
  template <typename Token>
  auto async_handshake(boost::asio::ssl::stream_base::handshake_type type, Token&& token) {
    return boost::asio::async_compose<Token, void(error_code)>(
        Op<false>([this, type](error_code& e, size_t*) { return HandshakeStep(type, e); }), token,
        next_);
  }
  template <typename MutableBuffers, typename Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    const boost::asio::mutable_buffer b = FirstNonEmpty(buffers);
    return boost::asio::async_compose<Token, void(error_code, size_t)>(
        Op<true>(
            [this, b](error_code& e, size_t* n) { return ReadStep(b.data(), b.size(), n, e); }),
        token, next_);
  }
  template <typename ConstBuffers, typename Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    // The buffers stay valid until the handler runs (Asio's rule), so they are encrypted when
    // the operation starts and only ciphertext waits for the socket.
    return boost::asio::async_compose<Token, void(error_code, size_t)>(
        Op<true>([this, buffers](error_code& e, size_t* n) { return EncryptAll(buffers, n, e); }),
        token, next_);
  }

 private:
  friend struct TlsBioAccess;
  struct Core;
  // What a step of OpenSSL's needs next; pending ciphertext is always sent first.
  enum class Want { kDone, kInput };

  template <typename F>
  static size_t OrThrow(F call) {
    error_code ec;
    const size_t n = call(ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }
  template <typename Buffers>
  static boost::asio::mutable_buffer FirstNonEmpty(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      if (boost::asio::mutable_buffer b(*it); b.size() > 0) return b;
    }
    return {};
  }
  template <typename Buffers>
  Want EncryptAll(const Buffers& buffers, size_t* n, error_code& ec) {
    *n = 0;
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers) && *n < kMaxPlaintextPerWrite; ++it) {
      const boost::asio::const_buffer b(*it);
      const size_t take = std::min(b.size(), kMaxPlaintextPerWrite - *n);
      if (take == 0) continue;
      if (!Encrypt(b.data(), take, ec)) break;
      *n += take;
    }
    return Want::kDone;
  }

  // The steps: each runs OpenSSL on what has arrived, leaving ciphertext to send in the output.
  Want HandshakeStep(boost::asio::ssl::stream_base::handshake_type type, error_code& ec);
  Want ReadStep(void* data, size_t size, size_t* n, error_code& ec);
  bool Encrypt(const void* data, size_t size, error_code& ec);

  // The buffers the next layer reads into and sends from, and their bookkeeping.
  boost::asio::mutable_buffer InputSpace();
  void Received(size_t n);
  void ReceivedEnd();
  boost::asio::const_buffer Output();
  void Sent();

  // Runs `step` to completion with blocking calls on the next layer.
  template <typename Step>
  void RunSync(Step step, error_code& ec) {
    for (;;) {
      ec = {};
      const Want want = step(ec);
      if (Output().size() > 0) {
        error_code write_ec;
        boost::asio::write(next_, Output(), write_ec);
        Sent();
        if (write_ec) {
          ec = write_ec;
          return;
        }
      }
      if (ec || want == Want::kDone) return;
      error_code read_ec;
      const size_t got = next_.read_some(InputSpace(), read_ec);
      if (read_ec == boost::asio::error::eof) {
        ReceivedEnd();
      } else if (read_ec) {
        ec = read_ec;
        return;
      } else {
        Received(got);
      }
    }
  }

  // The asynchronous form of RunSync. A step that completes before any I/O is completed
  // through a post, never inside the initiating call.
  template <bool kWithSize, typename Step>
  struct IoOp {
    TlsStream* s;
    Step step;
    enum { kStart, kWriting, kReading, kPosted } phase = kStart;
    Want want = Want::kDone;
    error_code ec;
    size_t n = 0;

    template <typename Self>
    static void Complete(Self& self, error_code e, size_t count) {
      if constexpr (kWithSize) {
        self.complete(e, count);
      } else {
        self.complete(e);
      }
    }

    template <typename Self>
    void operator()(Self& self, error_code io_ec = {}, size_t io_n = 0) {
      switch (phase) {
        case kStart:
          break;
        case kPosted:
          return Complete(self, ec, n);
        case kWriting:
          s->Sent();
          if (io_ec) return Complete(self, io_ec, 0);
          if (ec || want == Want::kDone) return Complete(self, ec, n);
          return Read(self);
        case kReading:
          if (io_ec == boost::asio::error::eof) {
            s->ReceivedEnd();
          } else if (io_ec) {
            return Complete(self, io_ec, 0);
          } else {
            s->Received(io_n);
          }
          break;
      }
      const bool first = phase == kStart;
      ec = {};
      want = step(ec, &n);
      if (s->Output().size() > 0) {
        phase = kWriting;
        return boost::asio::async_write(s->next_, s->Output(), std::move(self));
      }
      if (ec || want == Want::kDone) {
        if (!first) return Complete(self, ec, n);
        phase = kPosted;
        return boost::asio::post(std::move(self));
      }
      Read(self);
    }
    template <typename Self>
    void Read(Self& self) {
      phase = kReading;
      s->next_.async_read_some(s->InputSpace(), std::move(self));
    }
  };
  template <bool kWithSize, typename Step>
  IoOp<kWithSize, Step> Op(Step step) {
    return {this, std::move(step)};
  }

  next_layer_type next_;
  std::unique_ptr<Core> core_;
};

}  // namespace objectcache::s3
