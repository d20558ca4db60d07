// TlsStream between the two ends the project uses: the server's asynchronous side and the
// client's synchronous one, over loopback, with certificates made here.
#include "s3/tls_stream.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "core/seeded_data.h"
#include "s3/tls.h"
#include "store/scratch_dir.h"

namespace objectcache::s3 {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using asio::ip::tcp;
using error_code = boost::system::error_code;

// A self-signed P-256 certificate for IP 127.0.0.1, as PEM files under `dir`.
void MakeCertificate(const std::string& dir, const std::string& name) {
  EVP_PKEY* key = ::EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* x = ::X509_new();
  ::X509_set_version(x, 2);
  ::ASN1_INTEGER_set(::X509_get_serialNumber(x), 1);
  ::X509_gmtime_adj(::X509_getm_notBefore(x), -60);
  ::X509_gmtime_adj(::X509_getm_notAfter(x), 3600);
  ::X509_set_pubkey(x, key);
  X509_NAME* subject = ::X509_get_subject_name(x);
  ::X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(name.c_str()), -1, -1, 0);
  ::X509_set_issuer_name(x, subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  ::X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
  for (auto [nid, value] : {std::pair{NID_subject_alt_name, "IP:127.0.0.1"},
                            std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
    X509_EXTENSION* ext = ::X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    ASSERT_NE(ext, nullptr);
    ::X509_add_ext(x, ext, -1);
    ::X509_EXTENSION_free(ext);
  }
  ASSERT_GT(::X509_sign(x, key, ::EVP_sha256()), 0);
  FILE* cert = std::fopen((dir + "/" + name + ".pem").c_str(), "w");
  FILE* priv = std::fopen((dir + "/" + name + ".key").c_str(), "w");
  ASSERT_TRUE(cert && priv);
  ::PEM_write_X509(cert, x);
  ::PEM_write_PrivateKey(priv, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(cert);
  std::fclose(priv);
  ::X509_free(x);
  ::EVP_PKEY_free(key);
}

class TlsStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_ = MakeScratchDir();
    dir_ = std::filesystem::path(scratch_).parent_path().string();
    MakeCertificate(dir_, "server");
    MakeCertificate(dir_, "other");
  }
  void TearDown() override { RemoveTree(scratch_); }

  // Serves one connection with TlsStream's asynchronous side: reads `expect` bytes, then sends
  // `reply` in one asio::async_write and closes without close_notify. Returns the port; the
  // handshake's error and the bytes read land in the members once the thread is joined.
  uint16_t Serve(size_t expect, std::string reply) {
    auto context = ServerTlsContext(dir_ + "/server.pem", dir_ + "/server.key");
    EXPECT_TRUE(context.has_value()) << context.error().ToString();
    server_context_ = *context;
    acceptor_.open(tcp::v4());
    acceptor_.bind({asio::ip::make_address("127.0.0.1"), 0});
    acceptor_.listen();
    asio::co_spawn(
        ioc_,
        [this, expect, reply = std::move(reply)]() -> asio::awaitable<void> {
          tcp::socket socket = co_await acceptor_.async_accept(asio::use_awaitable);
          TlsStream stream(beast::tcp_stream(std::move(socket)), *server_context_, 4 << 10);
          error_code ec;
          co_await stream.async_handshake(asio::ssl::stream_base::server,
                                          asio::redirect_error(asio::use_awaitable, ec));
          handshake_ec_ = ec;
          if (ec) co_return;
          received_.resize(expect);
          co_await asio::async_read(stream, asio::buffer(received_),
                                    asio::redirect_error(asio::use_awaitable, ec));
          read_ec_ = ec;
          if (ec) co_return;
          co_await asio::async_write(stream, asio::buffer(reply),
                                     asio::redirect_error(asio::use_awaitable, ec));
          write_ec_ = ec;
          stream.next_layer().socket().shutdown(tcp::socket::shutdown_send, ec);
        },
        asio::detached);
    thread_ = std::thread([this] { ioc_.run(); });
    return acceptor_.local_endpoint().port();
  }

  // A synchronous client stream, connected and with the handshake done against `ca`.
  std::unique_ptr<TlsStream> Connect(uint16_t port, const std::string& ca, size_t input_bytes,
                                     error_code* ec) {
    auto context = ClientTlsContext(dir_ + "/" + ca + ".pem");
    EXPECT_TRUE(context.has_value());
    client_context_ = *context;
    beast::tcp_stream tcp(client_ioc_);
    tcp.socket().connect({asio::ip::make_address("127.0.0.1"), port});
    auto stream = std::make_unique<TlsStream>(std::move(tcp), *client_context_, input_bytes);
    EXPECT_TRUE(SetVerifiedPeerName(stream->native_handle(), "127.0.0.1").ok());
    stream->handshake(asio::ssl::stream_base::client, *ec);
    return stream;
  }

  void Join() {
    if (thread_.joinable()) thread_.join();
  }

  std::string scratch_, dir_;  // dir_: the scratch directory's parent, removed with it
  asio::io_context ioc_, client_ioc_;
  tcp::acceptor acceptor_{ioc_};
  std::shared_ptr<asio::ssl::context> server_context_, client_context_;
  std::thread thread_;
  error_code handshake_ec_, read_ec_, write_ec_;
  std::string received_;
};

TEST_F(TlsStreamTest, BytesCrossBothWaysWholeInPiecesOfAnySize) {
  // Several MiB each way, so that writes are cut at kMaxPlaintextPerWrite and records arrive
  // split across reads of every size.
  const std::string up = SeededBytes((3 << 20) + 17, 1), down = SeededBytes((5 << 20) + 5, 2);
  for (size_t input_bytes : {size_t{1} << 10, size_t{256} << 10}) {
    SCOPED_TRACE(input_bytes);
    ioc_.restart();
    acceptor_ = tcp::acceptor(ioc_);
    const uint16_t port = Serve(up.size(), down);
    error_code ec;
    std::unique_ptr<TlsStream> client = Connect(port, "server", input_bytes, &ec);
    ASSERT_FALSE(ec) << ec.message();
    // Uneven writes, from one byte up.
    std::mt19937 rng(3);
    for (size_t at = 0; at < up.size();) {
      const size_t n = std::min<size_t>(up.size() - at, 1 + rng() % (600 << 10));
      asio::write(*client, asio::buffer(up.data() + at, n), ec);
      ASSERT_FALSE(ec) << ec.message();
      at += n;
    }
    std::string got(down.size() + 1, '\0');
    size_t total = 0;
    while (!ec) {
      const size_t room = std::min<size_t>(got.size() - total, 1 + rng() % (300 << 10));
      total += client->read_some(asio::buffer(got.data() + total, room), ec);
    }
    // The server closed without close_notify: the end of the stream is a truncation, after
    // every byte sent.
    EXPECT_EQ(ec, asio::ssl::error::stream_truncated) << ec.message();
    Join();
    EXPECT_FALSE(handshake_ec_ || read_ec_ || write_ec_);
    EXPECT_TRUE(received_ == up);
    ASSERT_EQ(total, down.size());
    EXPECT_TRUE(got.substr(0, total) == down);
  }
}

TEST_F(TlsStreamTest, ACertificateFromAnotherAuthorityFailsTheHandshakeOnBothEnds) {
  const uint16_t port = Serve(1, "x");
  error_code ec;
  std::unique_ptr<TlsStream> client = Connect(port, "other", 64 << 10, &ec);
  EXPECT_EQ(ec.category(), asio::error::get_ssl_category()) << ec.message();
  client->next_layer().socket().close();
  Join();
  EXPECT_TRUE(handshake_ec_);
}

TEST_F(TlsStreamTest, EmptyReadsAndWritesCompleteWithoutIo) {
  const uint16_t port = Serve(1, "y");
  error_code ec;
  std::unique_ptr<TlsStream> client = Connect(port, "server", 64 << 10, &ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(client->write_some(asio::buffer("", 0), ec), 0u);
  EXPECT_EQ(client->read_some(asio::mutable_buffer(), ec), 0u);
  EXPECT_FALSE(ec);
  asio::write(*client, asio::buffer("z", 1), ec);
  char c = 0;
  asio::read(*client, asio::buffer(&c, 1), ec);
  EXPECT_EQ(c, 'y');
  Join();
  EXPECT_EQ(received_, "z");
}

}  // namespace
}  // namespace objectcache::s3
