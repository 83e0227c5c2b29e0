// Transport security and authentication: the server's TLS / mTLS credentials, bearer tokens
// (several, for rotation), and the metadata-path check that refuses an unauthenticated or
// compressed call before its body is read. The token file and the TLS files are re-read
// every --tls-refresh-seconds (CredentialManager): a token file that is unreadable or empty,
// and a certificate, key or CA bundle that does not parse or whose key does not match its
// certificate, is logged and the last good one keeps serving. Thread-safe.
#pragma once

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"
#include "core/status.hpp"

namespace gpusampler::server {

// The tokens of a token file: one per line, the whole line trimmed of surrounding
// whitespace, blank lines skipped. INVALID_ARGUMENT naming `path` when unreadable or empty.
Status LoadTokens(const std::string& path, std::vector<std::string>* tokens);

// The decision on a call's `authorization` values: OK when `tokens` is empty (auth off) or
// exactly one value equals "Bearer <token>" for one of `tokens` (compared in constant time
// per token); UNAUTHENTICATED when it is missing, wrong, or sent more than once.
Status CheckBearer(const std::vector<std::string>& tokens,
                   const std::vector<std::string>& authorization);

// Methods open without a token: the health service (probes).
bool OpenMethod(const std::string& path);

// The bearer tokens accepted now (empty: authentication off), replaced as a whole when the
// token file changes. Thread-safe.
class TokenSet {
 public:
  explicit TokenSet(std::vector<std::string> tokens = {})
      : tokens_(std::make_shared<const std::vector<std::string>>(std::move(tokens))) {}
  std::shared_ptr<const std::vector<std::string>> Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_;
  }
  void Set(std::vector<std::string> tokens) {
    auto next = std::make_shared<const std::vector<std::string>>(std::move(tokens));
    std::lock_guard<std::mutex> lock(mu_);
    tokens_ = std::move(next);
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const std::vector<std::string>> tokens_;
};

// Why a certificate, key and optional CA bundle (PEM text) cannot serve; "" when they can:
// each parses, and the key belongs to the first certificate of the chain.
std::string CheckTlsPair(const std::string& cert_pem, const std::string& key_pem,
                         const std::string& ca_pem);

// Why the first certificate of a PEM chain is not valid now ("expired at ...", "not valid
// before ..."); "" when it is (or when nothing parses: CheckTlsPair says so).
std::string CertificateTimeProblem(const std::string& cert_pem);

// Called for each call the metadata check refuses: its :path and status (requests_total).
using RefusalSink = std::function<void(const std::string& path, const Status& status)>;

// The listening credentials and the tokens, kept fresh. With TLS, gRPC's file watcher reads
// a private copy of the files that is replaced only by a set that passed CheckTlsPair, so a
// half-written or mismatched rotation never reaches a handshake.
class CredentialManager {
 public:
  explicit CredentialManager(const ServerConfig& config) : config_(config) {}
  ~CredentialManager();
  CredentialManager(const CredentialManager&) = delete;
  CredentialManager& operator=(const CredentialManager&) = delete;

  // Reads the token file and the TLS files and builds the credentials (see
  // MakeServerCredentials). INVALID_ARGUMENT naming the flag when a file is bad at start.
  Status Init(RefusalSink on_refused);
  std::shared_ptr<grpc::ServerCredentials> server_credentials() const { return credentials_; }
  std::shared_ptr<TokenSet> tokens() const { return tokens_; }
  // Re-reads the files every --tls-refresh-seconds from now on (a thread; when there is a
  // token file or TLS).
  void StartRefresh();
  // One re-read now; the refresh thread calls it.
  void Refresh();
  // Removes the private copy of the TLS files (the destructor does too); for an exit that
  // runs no destructors. Idempotent.
  void RemovePrivateFiles();

 private:
  void RefreshLoop();
  void RefreshTls();  // the TLS half of Refresh

  const ServerConfig config_;
  std::shared_ptr<TokenSet> tokens_ = std::make_shared<TokenSet>();
  std::shared_ptr<grpc::ServerCredentials> credentials_;
  std::string private_dir_;  // the copy gRPC's file watcher reads ("" without TLS)
  std::string good_cert_, good_key_, good_ca_;  // what the copy holds
  std::string last_error_;                      // the last TLS problem logged
  std::string last_token_error_;                // the token file's problem logged last
  std::atomic<bool> removed_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The listening credentials (what CredentialManager::Init builds): insecure, TLS, or mutual
// TLS (tls_client_ca_file), the certificates read from `cert_dir` (cert.pem, key.pem,
// ca.pem) every second. With TLS, an AuthMetadataProcessor checks every call's metadata
// before gRPC reads its body: the bearer token (unless OpenMethod) and, without
// accept_compression, a compressed request (grpc-encoding other than identity) is refused;
// each refusal is reported to `on_refused`. Plaintext gRPC allows no processor, so there the
// token is checked by the service, after the body has arrived, and compression is disabled
// on the channel.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(const ServerConfig& config,
                                                               const std::string& cert_dir,
                                                               std::shared_ptr<TokenSet> tokens,
                                                               RefusalSink on_refused);

// The check the processor runs, exposed for tests: `metadata` as gRPC hands it over
// (":path", "authorization", "grpc-encoding", ...); `tokens` (config.auth_tokens when null).
Status CheckCallMetadata(const ServerConfig& config,
                         const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                         const std::vector<std::string>* tokens = nullptr);

}  // namespace gpusampler::server
