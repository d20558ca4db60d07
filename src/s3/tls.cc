#include "s3/tls.h"

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/context.hpp>
#include <map>
#include <mutex>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

namespace objectcache::s3 {

namespace ssl = boost::asio::ssl;

namespace {

// The context's common settings: TLS 1.2 or later with forward-secret AEAD suites only, no
// compression, no renegotiation.
Result<std::shared_ptr<ssl::context>> NewContext(ssl::context::method method) {
  auto ctx = std::make_shared<ssl::context>(method);
  boost::system::error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 |
                       ssl::context::no_compression,
                   ec);
  if (ec) return InternalError("setting up TLS: " + ec.message());
  ::SSL_CTX_set_options(ctx->native_handle(), SSL_OP_NO_RENEGOTIATION);
  // AES-128-GCM first: as strong as the transfer needs and a third cheaper per byte than
  // AES-256-GCM (AES-NI); ChaCha20 for peers without AES instructions.
  if (::SSL_CTX_set_ciphersuites(ctx->native_handle(),
                                 "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256:"
                                 "TLS_AES_256_GCM_SHA384") != 1) {
    ::ERR_clear_error();
    return InternalError("setting the TLS 1.3 cipher suites");
  }
  // TLS 1.2: the same, with an ephemeral key exchange (forward secrecy) and AEAD only: no
  // static RSA, no CBC with SHA-1 or SHA-2 MACs.
  if (::SSL_CTX_set_cipher_list(ctx->native_handle(),
                                "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                                "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
                                "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384") != 1) {
    ::ERR_clear_error();
    return InternalError("setting the TLS 1.2 cipher suites");
  }
  return ctx;
}

}  // namespace

Result<std::shared_ptr<ssl::context>> ClientTlsContext(const std::string& ca_file) {
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<ssl::context>> contexts;  // guarded by mu
  std::lock_guard lock(mu);
  if (auto it = contexts.find(ca_file); it != contexts.end()) return it->second;
  OC_ASSIGN_OR_RETURN(std::shared_ptr<ssl::context> ctx, NewContext(ssl::context::tls_client));
  boost::system::error_code ec;
  if (ca_file.empty()) {
    ctx->set_default_verify_paths(ec);
    if (ec) return InternalError("loading the system's trusted CAs: " + ec.message());
  } else {
    ctx->load_verify_file(ca_file, ec);
    if (ec) return InvalidArgumentError("CA file '" + ca_file + "': " + ec.message());
  }
  ctx->set_verify_mode(ssl::verify_peer, ec);
  if (ec) return InternalError("setting up TLS verification: " + ec.message());
  contexts.emplace(ca_file, ctx);
  return ctx;
}

Result<std::shared_ptr<ssl::context>> ServerTlsContext(const std::string& cert_file,
                                                       const std::string& key_file) {
  OC_ASSIGN_OR_RETURN(std::shared_ptr<ssl::context> ctx, NewContext(ssl::context::tls_server));
  boost::system::error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) return InvalidArgumentError("TLS certificate '" + cert_file + "': " + ec.message());
  ctx->use_private_key_file(key_file, ssl::context::pem, ec);
  if (ec) return InvalidArgumentError("TLS key '" + key_file + "': " + ec.message());
  if (::SSL_CTX_check_private_key(ctx->native_handle()) != 1) {
    ::ERR_clear_error();
    return InvalidArgumentError("TLS key '" + key_file + "' does not match the certificate '" +
                                cert_file + "'");
  }
  return ctx;
}

Status SetVerifiedPeerName(void* ssl_handle, const std::string& host) {
  SSL* s = static_cast<SSL*>(ssl_handle);
  boost::system::error_code ec;
  boost::asio::ip::make_address(host, ec);
  X509_VERIFY_PARAM* param = ::SSL_get0_param(s);
  const bool ok = ec ? (::SSL_set_tlsext_host_name(s, host.c_str()) == 1 &&
                        ::X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size()) == 1)
                     : ::X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str()) == 1;
  if (!ok) {
    ::ERR_clear_error();
    return InvalidArgumentError("cannot verify TLS peer name '" + host + "'");
  }
  return Status();
}

}  // namespace objectcache::s3
