#include "s3/tls_stream.h"

#include <boost/asio/ssl/error.hpp>
#include <cstring>
#include <stdexcept>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

namespace objectcache::s3 {

namespace asio = boost::asio;

// The SSL object and the two ciphertext buffers its BIO reads from and writes to.
struct TlsStream::Core {
  SSL* ssl = nullptr;
  std::vector<uint8_t> input;  // [input_begin, input_end) received, not yet read by OpenSSL
  size_t input_begin = 0, input_end = 0;
  bool input_ended = false;     // the peer closed its side
  bool role_set = false;        // SSL_set_connect_state or _accept_state called
  std::vector<uint8_t> output;  // ciphertext not yet sent

  ~Core() {
    if (ssl != nullptr) ::SSL_free(ssl);  // frees the BIO too
  }
};

// The BIO's two ends, reaching the core through the BIO's data pointer.
struct TlsBioAccess {
  static int Write(BIO* bio, const char* data, size_t size, size_t* written) {
    auto* core = static_cast<TlsStream::Core*>(::BIO_get_data(bio));
    const auto* bytes = reinterpret_cast<const uint8_t*>(data);  // same type: one memcpy
    core->output.insert(core->output.end(), bytes, bytes + size);
    *written = size;
    return 1;
  }
  // All there is, up to `size`; when nothing is there, "retry" until the peer has closed, then
  // end of file.
  static int Read(BIO* bio, char* data, size_t size, size_t* read) {
    auto* core = static_cast<TlsStream::Core*>(::BIO_get_data(bio));
    ::BIO_clear_retry_flags(bio);
    const size_t available = core->input_end - core->input_begin;
    *read = std::min(size, available);
    if (*read == 0) {
      if (!core->input_ended) ::BIO_set_retry_read(bio);
      return 0;
    }
    std::memcpy(data, core->input.data() + core->input_begin, *read);
    core->input_begin += *read;
    if (core->input_begin == core->input_end) core->input_begin = core->input_end = 0;
    return 1;
  }
  static long Ctrl(BIO* /*bio*/, int cmd, long /*num*/, void* /*ptr*/) {  // NOLINT(runtime/int)
    // OpenSSL flushes after each record and asks nothing else a memory pipe must answer.
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
  }
  static int Create(BIO* bio) {
    ::BIO_set_init(bio, 1);
    return 1;
  }
};

namespace {

// The BIO method shared by every stream.
BIO_METHOD* Method() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = ::BIO_meth_new(::BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "objectcache");
    if (m == nullptr || ::BIO_meth_set_write_ex(m, TlsBioAccess::Write) != 1 ||
        ::BIO_meth_set_read_ex(m, TlsBioAccess::Read) != 1 ||
        ::BIO_meth_set_ctrl(m, TlsBioAccess::Ctrl) != 1 ||
        ::BIO_meth_set_create(m, TlsBioAccess::Create) != 1) {
      throw std::runtime_error("OpenSSL: cannot create a BIO method");
    }
    return m;
  }();
  return method;
}

}  // namespace

TlsStream::TlsStream(next_layer_type next, asio::ssl::context& context, size_t input_bytes)
    : next_(std::move(next)), core_(std::make_unique<Core>()) {
  core_->input.resize(std::max<size_t>(input_bytes, 1 << 10));
  core_->ssl = ::SSL_new(context.native_handle());
  BIO* bio = core_->ssl ? ::BIO_new(Method()) : nullptr;
  if (bio == nullptr) {
    ::ERR_clear_error();
    throw std::runtime_error("OpenSSL: cannot create a TLS connection");
  }
  ::BIO_set_data(bio, core_.get());
  ::SSL_set_bio(core_->ssl, bio, bio);
}

TlsStream::TlsStream(TlsStream&&) noexcept = default;
TlsStream::~TlsStream() = default;

SSL* TlsStream::native_handle() { return core_->ssl; }

namespace {

// The error_code for a failed OpenSSL call that returned `ret`.
boost::system::error_code SslError(SSL* ssl, int ret, bool input_ended) {
  const int err = ::SSL_get_error(ssl, ret);
  if (err == SSL_ERROR_ZERO_RETURN) return asio::error::eof;
  const unsigned long code = ::ERR_get_error();  // NOLINT(runtime/int)
  ::ERR_clear_error();
  if (input_ended && (err == SSL_ERROR_SYSCALL || err == SSL_ERROR_WANT_READ ||
                      ERR_GET_REASON(code) == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
    return asio::ssl::error::stream_truncated;
  }
  if (code != 0) return {static_cast<int>(code), asio::error::get_ssl_category()};
  return asio::error::connection_aborted;
}

}  // namespace

TlsStream::Want TlsStream::HandshakeStep(asio::ssl::stream_base::handshake_type type,
                                         error_code& ec) {
  SSL* ssl = core_->ssl;
  if (!core_->role_set) {  // once: either call restarts the handshake
    core_->role_set = true;
    if (type == asio::ssl::stream_base::client) {
      ::SSL_set_connect_state(ssl);
    } else {
      ::SSL_set_accept_state(ssl);
    }
  }
  ::ERR_clear_error();
  const int ret = ::SSL_do_handshake(ssl);
  if (ret == 1) return Want::kDone;
  if (::SSL_get_error(ssl, ret) == SSL_ERROR_WANT_READ && !core_->input_ended) return Want::kInput;
  ec = SslError(ssl, ret, core_->input_ended);
  return Want::kDone;
}

TlsStream::Want TlsStream::ReadStep(void* data, size_t size, size_t* n, error_code& ec) {
  *n = 0;
  if (size == 0) return Want::kDone;
  SSL* ssl = core_->ssl;
  ::ERR_clear_error();
  const int ret = ::SSL_read_ex(ssl, data, size, n);
  if (ret == 1) return Want::kDone;
  if (::SSL_get_error(ssl, ret) == SSL_ERROR_WANT_READ && !core_->input_ended) return Want::kInput;
  ec = SslError(ssl, ret, core_->input_ended);
  return Want::kDone;
}

bool TlsStream::Encrypt(const void* data, size_t size, error_code& ec) {
  // The BIO takes everything, so OpenSSL writes all of it or fails.
  SSL* ssl = core_->ssl;
  ::ERR_clear_error();
  size_t written = 0;
  const int ret = ::SSL_write_ex(ssl, data, size, &written);
  if (ret == 1 && written == size) return true;
  ec = SslError(ssl, ret, core_->input_ended);
  return false;
}

asio::mutable_buffer TlsStream::InputSpace() {
  Core& c = *core_;
  if (c.input_begin > 0) {  // keep the unread bytes at the front
    std::memmove(c.input.data(), c.input.data() + c.input_begin, c.input_end - c.input_begin);
    c.input_end -= c.input_begin;
    c.input_begin = 0;
  }
  return asio::buffer(c.input.data() + c.input_end, c.input.size() - c.input_end);
}

void TlsStream::Received(size_t n) { core_->input_end += n; }

void TlsStream::ReceivedEnd() { core_->input_ended = true; }

asio::const_buffer TlsStream::Output() { return asio::buffer(core_->output); }

void TlsStream::Sent() { core_->output.clear(); }

}  // namespace objectcache::s3
