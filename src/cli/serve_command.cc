#include "cli/serve_command.h"

#include <signal.h>
#include <sys/resource.h>

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "cli/cli_support.h"
#include "objectcache/store_registry.h"
#include "sched/bandwidth_scheduler.h"
#include "server/http_server.h"
#include "server/log.h"
#include "server/metrics_handler.h"
#include "server/s3_handler.h"
#include "server/tenants.h"

namespace objectcache::cli {
namespace {

struct ServeFlags {
  std::string listen = "127.0.0.1:9000";
  std::string store = std::string(kDefaultStoreUri);
  std::string capacity;
  std::string access_key, secret_key;
  bool anonymous = false;
  bool no_sigv2 = false;
  unsigned workers = 2;
  unsigned blocking_threads = 8;
  std::vector<std::string> virtual_host_domains = {"localhost"};
  std::string region = "us-east-1";
  size_t max_header_bytes = 16 << 10;
  std::string max_body = "5GiB";
  unsigned header_timeout_s = 30, io_timeout_s = 60, idle_timeout_s = 60;
  size_t max_connections = 4096;
  unsigned shutdown_grace_s = 10;
  bool no_sendfile = false;
  std::string io_buffer = "1MiB";
  std::string log_level = "info";
  std::string log_format = "text";
  std::string port_file;
  std::string bandwidth_cap = "unlimited";
  std::string sched_policy = "compute-aware";
  std::string request_memory = "1GiB";
  size_t max_open_batch_objects = 0;  // 0: half the open-file limit, 256 to 8192
  std::string layerwise_window;       // empty: 128 MiB, or half of --request-memory if less
  std::string metrics_listen;
  std::string tls_cert, tls_key;
  std::string credentials_file;
  uint64_t upload_expiry_s = 3 * 24 * 3600;
  size_t max_uploads_per_bucket = 1000;
};

// Raises the soft open-file limit to the hard one (connections and cached object files are
// file descriptors) and returns the limit in force.
uint64_t RaiseOpenFileLimit() {
  struct rlimit lim {};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 1024;
  if (lim.rlim_cur < lim.rlim_max) {
    struct rlimit raised = lim;
    raised.rlim_cur = lim.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) lim = raised;
  }
  return lim.rlim_cur == RLIM_INFINITY ? uint64_t{1} << 20 : static_cast<uint64_t>(lim.rlim_cur);
}

// "HOST:PORT" (HOST an IP address, [v6] in brackets) into the options' host and port; the
// whole of PORT is a number ("9000abc" is not 9000).
Status ParseListen(const std::string& flag, const std::string& listen, std::string* host,
                   uint16_t* port) {
  const size_t colon = listen.rfind(':');
  const char* end = listen.data() + listen.size();
  if (colon == std::string::npos) {
    return InvalidArgumentError(flag + " must be HOST:PORT, got '" + listen + "'");
  }
  const auto [stop, ec] = std::from_chars(listen.data() + colon + 1, end, *port);
  if (ec != std::errc() || stop != end) {
    return InvalidArgumentError(flag + " must be HOST:PORT, got '" + listen + "'");
  }
  *host = listen.substr(0, colon);
  if (host->starts_with("[") && host->ends_with("]")) *host = host->substr(1, host->size() - 2);
  return Status();
}

// "http://HOST:PORT" as a URL writes it: an IPv6 host in brackets.
std::string Url(bool tls, const std::string& host, uint16_t port) {
  const std::string h = host.find(':') == std::string::npos ? host : "[" + host + "]";
  return (tls ? "https://" : "http://") + h + ":" + std::to_string(port);
}

Status RunServe(const ServeFlags& f) {
  using namespace objectcache::server;
  const Result<LogFormat> format = ParseLogFormat(f.log_format);
  if (!format) return format.status().Annotate("--log-format");
  SetLogFormat(*format);
  const Result<LogLevel> level = ParseLogLevel(f.log_level);
  if (!level) return level.status().Annotate("--log-level");
  SetLogLevel(*level);
  server::HttpServerOptions http;
  OC_RETURN_IF_ERROR(ParseListen("--listen", f.listen, &http.host, &http.port));
  http.workers = f.workers;
  http.limits.header_bytes = f.max_header_bytes;
  OC_ASSIGN_OR_RETURN(http.limits.body_bytes, ParseByteSize(f.max_body));
  http.limits.header_timeout = std::chrono::seconds(f.header_timeout_s);
  http.limits.io_timeout = std::chrono::seconds(f.io_timeout_s);
  http.limits.idle_timeout = std::chrono::seconds(f.idle_timeout_s);
  http.limits.max_connections = f.max_connections;
  http.shutdown_grace = std::chrono::seconds(f.shutdown_grace_s);
  http.send_files = !f.no_sendfile;

  S3Options s3;
  s3.anonymous = f.anonymous;
  s3.sigv2 = !f.no_sigv2;
  OC_ASSIGN_OR_RETURN(s3.request_memory_bytes, ParseByteSize(f.request_memory));
  if (f.layerwise_window.empty()) {
    s3.layerwise_window_bytes = static_cast<size_t>(std::max<uint64_t>(
        64 << 10,
        std::min<uint64_t>(S3Options().layerwise_window_bytes, s3.request_memory_bytes / 2)));
  } else {
    OC_ASSIGN_OR_RETURN(uint64_t window, ParseByteSize(f.layerwise_window));
    if (window < (64 << 10) || window > s3.request_memory_bytes / 2) {
      return InvalidArgumentError("--layerwise-window: from 64KiB to half of --request-memory (" +
                                  f.request_memory + "); a response holds two windows");
    }
    s3.layerwise_window_bytes = static_cast<size_t>(window);
  }
  s3.upload_expiry = std::chrono::seconds(f.upload_expiry_s);
  s3.max_uploads_per_bucket = f.max_uploads_per_bucket;
  s3.serve_metrics = f.metrics_listen.empty();
  s3.virtual_host_domains = f.virtual_host_domains;
  s3.region = f.region;
  s3.blocking_threads = f.blocking_threads;
  OC_ASSIGN_OR_RETURN(s3.bandwidth_cap, sched::ParseBandwidth(f.bandwidth_cap));
  OC_ASSIGN_OR_RETURN(s3.policy, sched::ParsePolicy(f.sched_policy));
  OC_ASSIGN_OR_RETURN(uint64_t io_buffer, ParseByteSize(f.io_buffer));
  if (io_buffer < 4096 || io_buffer > (64 << 20)) {
    return InvalidArgumentError("--io-buffer " + f.io_buffer + ": from 4KiB to 64MiB");
  }
  s3.io_buffer_bytes = static_cast<size_t>(io_buffer);
  // A budget that cannot hold one upload's buffer, or one layerwise response's two windows,
  // would answer every such request 503 SlowDown however long its client retried.
  const uint64_t one_request =
      std::max<uint64_t>(s3.io_buffer_bytes, 2 * uint64_t{s3.layerwise_window_bytes});
  if (s3.request_memory_bytes < one_request) {
    return InvalidArgumentError("--request-memory " + f.request_memory + " holds no request: " +
                                "give at least " + std::to_string(one_request) +
                                " bytes (one upload's --io-buffer, and two layerwise windows)");
  }
  std::string access = f.access_key, secret = f.secret_key;
  if (access.empty()) {
    if (const char* e = std::getenv("OBJECTCACHE_ACCESS_KEY")) access = e;
  }
  if (secret.empty()) {
    if (const char* e = std::getenv("OBJECTCACHE_SECRET_KEY")) secret = e;
  }
  if (access.empty() != secret.empty()) {
    return InvalidArgumentError("give both an access key and a secret key");
  }
  if (!access.empty()) s3.credentials[access] = secret;
  const bool tenants = !f.credentials_file.empty();
  if (tenants && (s3.anonymous || !access.empty())) {
    return InvalidArgumentError(
        "--credentials gives every key a tenant: it does not go with --anonymous or "
        "--access-key/--secret-key (nor OBJECTCACHE_ACCESS_KEY/OBJECTCACHE_SECRET_KEY)");
  }
  auto read_tenants = [&]() -> Result<std::vector<TenantConfig>> {
    OC_ASSIGN_OR_RETURN(std::string text, ReadFile(f.credentials_file, kMaxCredentialsFileBytes));
    return ParseTenantsFile(text, f.credentials_file);
  };
  std::vector<TenantConfig> tenant_configs;
  if (tenants) {
    OC_ASSIGN_OR_RETURN(tenant_configs, read_tenants());
  }
  if (s3.credentials.empty() && !s3.anonymous && !tenants) {
    return InvalidArgumentError(
        "no credentials: give --access-key and --secret-key (or OBJECTCACHE_ACCESS_KEY and "
        "OBJECTCACHE_SECRET_KEY), or --anonymous for local development");
  }

  if (f.tls_cert.empty() != f.tls_key.empty()) {
    return InvalidArgumentError("give both --tls-cert and --tls-key");
  }
  std::unique_ptr<TlsCertificates> tls;
  if (!f.tls_cert.empty()) {
    OC_ASSIGN_OR_RETURN(tls, TlsCertificates::Load(f.tls_cert, f.tls_key));
    http.tls = tls.get();
  }

  const uint64_t open_file_limit = RaiseOpenFileLimit();
  s3.max_open_batch_objects =
      f.max_open_batch_objects > 0
          ? f.max_open_batch_objects
          : static_cast<size_t>(std::clamp<uint64_t>(open_file_limit / 2, 256, 8192));
  std::string uri = f.store;
  auto add_option = [&uri](const std::string& name, uint64_t value) {
    uri += (uri.find('?') == std::string::npos ? "?" : "&") + name + "=" + std::to_string(value);
  };
  const bool local_store = uri.starts_with("file://") || uri.find("://") == std::string::npos;
  if (!f.capacity.empty()) {
    OC_ASSIGN_OR_RETURN(uint64_t cap, ParseStoreCapacity(f.capacity));
    if (!local_store && !uri.starts_with("rados://")) {
      return InvalidArgumentError("--capacity bounds a file:// or rados:// store, not " + uri +
                                  " (a memory store cannot evict; an s3:// bucket is bounded "
                                  "by its server)");
    }
    add_option("capacity", cap);
  }
  // The local store's cache of open object files takes at most a quarter of the descriptors;
  // the rest are for connections.
  if (local_store && uri.find("open_files=") == std::string::npos) {
    add_option("open_files", std::min<uint64_t>(4096, open_file_limit / 4));
  }
  // With tenants, a local store's capacity bounds its own files and every tenant's together.
  StoreContext context;
  if (tenants) {
    OC_ASSIGN_OR_RETURN(context.shared_capacity, ServerCapacity(uri));
  }
  OC_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, OpenStoreFlag(uri, context));

  // Signals are taken by sigwait below, on this thread only.
  const sigset_t signals = BlockSignals({SIGINT, SIGTERM, SIGHUP});

  ServerMetrics metrics;
  std::unique_ptr<RequestHandler> handler;
  TenantRouter* router = nullptr;
  if (tenants) {
    auto r =
        std::make_unique<TenantRouter>(uri, store.get(), &metrics, s3, context.shared_capacity);
    OC_RETURN_IF_ERROR(r->Apply(tenant_configs));
    router = r.get();
    // The tenants' names and usage only on the operator's own metrics port: the S3 port's
    // /metrics is unsigned.
    if (!f.metrics_listen.empty()) {
      metrics.more_series = [router] { return router->RenderMetrics(); };
    }
    handler = std::move(r);
  } else {
    handler = std::make_unique<S3Handler>(store.get(), &metrics, s3);
  }
  OC_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> srv,
                      HttpServer::Start(http, handler.get(), &metrics));
  // Metrics on their own port (say loopback only), answered by their own handler.
  ServerMetrics metrics_port_metrics;
  MetricsHandler metrics_handler(store.get(), &metrics);
  std::unique_ptr<HttpServer> metrics_srv;
  if (!f.metrics_listen.empty()) {
    HttpServerOptions m;
    OC_RETURN_IF_ERROR(ParseListen("--metrics-listen", f.metrics_listen, &m.host, &m.port));
    m.workers = 1;
    m.limits.max_connections = 64;
    OC_ASSIGN_OR_RETURN(metrics_srv, HttpServer::Start(m, &metrics_handler, &metrics_port_metrics));
    LogInfo("metrics on " + Url(false, m.host, metrics_srv->port()) + "/metrics");
  }
  LogInfo("objectcache serve: listening on " + Url(tls != nullptr, http.host, srv->port()) +
          " (store " + store->Uri() + ", " + std::to_string(http.workers) + " I/O workers, " +
          (s3.anonymous ? std::string("ANONYMOUS")
           : tenants
               ? std::to_string(tenant_configs.size()) + " tenant(s) from " + f.credentials_file
               : std::to_string(s3.credentials.size()) + " credential(s)") +
          ", " + std::to_string(open_file_limit) + " file descriptors)");
  if (!f.port_file.empty()) {
    OC_RETURN_IF_ERROR(WriteFileAtomically(f.port_file, std::to_string(srv->port()) + "\n"));
  }
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) {
    // Reload what can change without a restart; what fails to load leaves the old in force.
    if (tls) {
      if (Status s = tls->Reload(); s.ok()) {
        LogInfo("SIGHUP: reloaded the TLS certificate " + f.tls_cert);
      } else {
        LogError("SIGHUP: keeping the TLS certificate in force: " + s.ToString());
      }
    }
    if (router) {
      Result<std::vector<TenantConfig>> next = read_tenants();
      Status s = next.has_value() ? router->Apply(*next) : next.error();
      if (s.ok()) {
        LogInfo("SIGHUP: " + std::to_string(next->size()) + " tenant(s) from " +
                f.credentials_file);
      } else {
        LogError("SIGHUP: keeping the tenants in force: " + s.ToString());
      }
    }
  }
  LogInfo(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
          ": stopping (no new connections; requests in flight finish)");
  srv->Stop();
  srv.reset();
  if (metrics_srv) metrics_srv->Stop();
  metrics_srv.reset();
  handler.reset();
  LogInfo("stopped");
  return Status();
}

}  // namespace

void AddServeCommand(CLI::App* app) {
  // A timeout of 0 would expire every read as it starts; a day is longer than any request.
  const CLI::Range kTimeoutRange(1u, 86400u);
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd = AddCommand(
      app, "serve",
      "Run the S3-compatible server (with no arguments: ./objectcache-data on 127.0.0.1:9000). "
      "--config FILE reads these options from the [serve] section of a TOML/INI file.",
      f, RunServe);
  cmd->add_option("--listen", f->listen, "Address to listen on, HOST:PORT (port 0: any free port)");
  cmd->add_option("--store", f->store,
                  "Store URI (file:///path, a plain path, rados://POOL?conf=PATH&namespace=NS, "
                  "s3://HOST:PORT/BUCKET, mem://)");
  cmd->add_option("--capacity", f->capacity,
                  "Store capacity (e.g. 500GiB): evict LRU objects beyond it");
  cmd->add_option("--access-key", f->access_key, "Access key (also OBJECTCACHE_ACCESS_KEY)");
  cmd->add_option("--secret-key", f->secret_key, "Secret key (also OBJECTCACHE_SECRET_KEY)");
  cmd->add_flag("--anonymous", f->anonymous,
                "Accept unsigned requests without checking signatures (local development only)");
  cmd->add_flag("--no-sigv2", f->no_sigv2,
                "Refuse Signature Version 2 requests (accepted by default, as radosgw and MinIO "
                "do; see docs/security.md)");
  cmd->add_option("--workers", f->workers, "I/O threads, each with its own event loop")
      ->check(CLI::Range(1u, 1024u));
  cmd->add_option("--blocking-threads", f->blocking_threads, "Threads for store calls")
      ->check(CLI::Range(1u, 4096u));
  cmd->add_option("--virtual-host-domain", f->virtual_host_domains,
                  "Hosts BUCKET.DOMAIN address buckets virtual-hosted style (repeatable)");
  cmd->add_option("--region", f->region, "Region reported to clients");
  cmd->add_option("--max-header-bytes", f->max_header_bytes,
                  "Largest request header (a signed S3 request's is several hundred bytes)")
      ->check(CLI::Range(size_t{1} << 10, size_t{1} << 20));
  cmd->add_option("--max-body", f->max_body, "Largest single PUT body");
  cmd->add_option("--header-timeout", f->header_timeout_s, "Seconds to receive a whole header")
      ->check(kTimeoutRange);
  cmd->add_option("--io-timeout", f->io_timeout_s, "Seconds a body read or write may stall")
      ->check(kTimeoutRange);
  cmd->add_option("--idle-timeout", f->idle_timeout_s,
                  "Seconds an idle keep-alive connection stays open")
      ->check(kTimeoutRange);
  cmd->add_option("--max-connections", f->max_connections, "Open connections at most")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd->add_option("--shutdown-grace", f->shutdown_grace_s,
                  "Seconds requests in flight get to finish after SIGTERM/SIGINT");
  cmd->add_flag("--no-sendfile", f->no_sendfile,
                "Copy object bytes through a buffer even over plain HTTP (as over TLS) instead "
                "of sendfile(2) from the local store's files");
  cmd->add_option("--io-buffer", f->io_buffer, "Streaming buffer per request, 4KiB to 64MiB");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn or error");
  cmd->add_option("--log-format", f->log_format, "text, or json: one JSON object a line");
  cmd->add_option("--port-file", f->port_file, "Write the port actually listened on to this file");
  cmd->add_option("--bandwidth-cap", f->bandwidth_cap,
                  "One cap for all layerwise responses together (50Gbit, 2GB, unlimited)");
  cmd->add_option("--sched-policy", f->sched_policy,
                  "How the cap is shared: equal, bytes, compute-aware (docs/scheduler.md)");
  cmd->add_option("--request-memory", f->request_memory,
                  "Memory for all requests together: small bodies, upload buffers, layerwise "
                  "windows (beyond it: 503 SlowDown)");
  cmd->add_option("--max-open-batch-objects", f->max_open_batch_objects,
                  "Objects a tenant's unfinished batch stores hold open together, each a file "
                  "until its request commits (beyond it: 503 SlowDown); default half the open-file "
                  "limit, 256 to 8192 (a batch store's most records)")
      ->default_str("")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
  cmd->add_option("--layerwise-window", f->layerwise_window,
                  "Read-ahead of a layerwise response the store reads into memory (v1, TLS, "
                  "RADOS, S3): whole layers of every hit chunk when they fit, two windows per "
                  "response (docs/wire-format.md); default 128MiB, or half of --request-memory "
                  "if less");
  cmd->add_option("--metrics-listen", f->metrics_listen,
                  "Serve GET /metrics on this HOST:PORT only (e.g. 127.0.0.1:9100) instead of "
                  "unauthenticated on --listen");
  cmd->add_option("--credentials", f->credentials_file,
                  "Tenants: a TOML file of tenants, their keys and quotas, each tenant with a "
                  "store namespace of its own (docs/tenants.md; reread on SIGHUP)");
  cmd->add_option("--tls-cert", f->tls_cert,
                  "Serve HTTPS only, with this PEM certificate chain (leaf first; reread on "
                  "SIGHUP)");
  cmd->add_option("--tls-key", f->tls_key, "The PEM private key of --tls-cert (reread on SIGHUP)");
  cmd->add_option("--upload-expiry", f->upload_expiry_s,
                  "Seconds after which an unfinished multipart upload and its parts are removed")
      ->check(CLI::Range(uint64_t{1}, uint64_t{10} * 365 * 24 * 3600));
  cmd->add_option("--max-uploads-per-bucket", f->max_uploads_per_bucket,
                  "Unfinished multipart uploads a bucket may have at once")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
}

}  // namespace objectcache::cli
