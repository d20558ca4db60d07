// TLS contexts for both ends of an S3 connection, OpenSSL through Asio: a client that verifies
// the server's certificate chain and name, and a server that presents a certificate chain.
#pragma once

#include <memory>
#include <string>

#include "objectcache/status.h"

namespace boost::asio::ssl {
class context;
}

namespace objectcache::s3 {

// TLS 1.2 or later; peer verification on, against the PEM bundle `ca_file` (empty: the
// system's trusted CAs). One context per bundle is shared by every connection of the process.
Result<std::shared_ptr<boost::asio::ssl::context>> ClientTlsContext(const std::string& ca_file);

// TLS 1.2 or later, presenting the PEM certificate chain `cert_file` (leaf first) with the PEM
// private key `key_file`; InvalidArgument naming the file when either is unreadable or they
// do not match.
Result<std::shared_ptr<boost::asio::ssl::context>> ServerTlsContext(const std::string& cert_file,
                                                                    const std::string& key_file);

// Asks OpenSSL to check the peer's certificate against `host` (a DNS name or an IP address)
// and sends it as SNI when it is a name. `ssl` is the connection's SSL*.
Status SetVerifiedPeerName(void* ssl, const std::string& host);

}  // namespace objectcache::s3
