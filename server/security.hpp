// Transport security and authentication: the server's TLS / mTLS credentials (certificates
// re-read by gRPC's file-watcher provider), bearer tokens (several, for rotation), and the
// metadata-path check that refuses an unauthenticated or compressed call before its body is
// read. Thread-safe: everything here is immutable once built.
#pragma once

#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>
#include <vector>

#include "config.hpp"
#include "status.hpp"

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

// The listening credentials for `config`: insecure, TLS, or mutual TLS (tls_client_ca_file).
// With TLS, an AuthMetadataProcessor checks every call's metadata before gRPC reads its body:
// the bearer token (unless OpenMethod) and, without accept_compression, a compressed request
// (grpc-encoding other than identity) is refused. Plaintext gRPC allows no processor, so there
// the token is checked by the service and compression is disabled on the channel.
// INVALID_ARGUMENT naming the flag for a bad TLS setting (missing or unreadable files).
Status MakeServerCredentials(const ServerConfig& config,
                             std::shared_ptr<grpc::ServerCredentials>* credentials);

// The check the processor runs, exposed for tests: `metadata` as gRPC hands it over
// (":path", "authorization", "grpc-encoding", ...).
Status CheckCallMetadata(const ServerConfig& config,
                         const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);

}  // namespace gpusampler::server
