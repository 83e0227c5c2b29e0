// The dataset repository (SPEC section 6): the --dataset-dir directory, on storage that every
// replica mounts, is the only state replicas share. A replica loads the committed datasets
// at start, re-scans every --dataset-poll-seconds, loads a dataset it lacks on a miss (read
// your writes), and commits uploads and deletions there (write-through).
//
// Layout. A committed dataset is either
//   NAME.dataset                       written by CreateDataset (one file: the commit is one
//                                      rename, or one link for a new name), or
//   NAME.labels.npy [+ NAME.features.npy, NAME.row_splits.npy]   written by hand or a
//                                      pipeline (NAME.dataset wins when both exist).
//                                      2-D labels [B, N] (no row_splits) are B rows of N
//                                      elements, held as a stride (Dataset::Rows::kFixed);
//                                      features are then [B, N, ...], scores [B, N].
// An upload is written to NAME.dataset.tmp-<pid>-<random>, fsynced, and then renamed (or,
// without replace, hard-linked, so that of two replicas creating one name the first wins)
// to NAME.dataset, and the directory is fsynced. Nothing reads a .tmp- file; one older than
// an hour is a crash's leftover and is removed by the re-scan. Only a name of exactly that
// shape (a valid NAME, ".dataset.tmp-", decimal pid, "-", 16 lowercase hex digits, nothing
// after) is a leftover: "keep.dataset.tmp-1-abc" is a valid dataset name and is kept.
//
// NAME.dataset: "GSDATA01", the 64 hex digits of sha256, three little-endian uint64 lengths
// (labels, features, row_splits sections; 0 = absent), then the sections, each a complete
// version 1.0 .npy file.
//
// What this relies on (POSIX, and what NFS, CephFS and cloud file stores provide): rename()
// of a file over another in one directory is atomic (a reader opens the old or the new
// file, never a mix); link() fails with EEXIST when the name exists; data fsynced and closed
// before the rename is what a reader that opens the file after it sees (NFS close-to-open
// consistency); an open file stays readable after it is replaced or unlinked. A replica
// notices replacements by the file's (device, inode, size, mtime), so a mount that caches
// attributes (NFS actimeo) delays convergence by up to that cache's lifetime.
//
// Thread-safety: thread-safe. Locking is per dataset name: loads, commits, deletions and
// the re-scan's work on one name run one at a time (a load is single-flight: concurrent
// misses for one name load it once), while other names, and misses of names the directory
// lacks, go on meanwhile. No lock is held while the directory is listed. A listing that
// fails (EMFILE, EACCES, an unmounted directory) changes nothing: it is logged once per
// failure streak and counted (Hooks::on_scan_failure).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"
#include "core/status.hpp"
#include "datasets/datasets.hpp"

namespace gpusampler::server {

class Repository {
 public:
  struct Hooks {
    std::function<void(bool ok)> on_load;   // a dataset loaded (ok) or a bad file (error)
    std::function<void()> on_change;        // the resident datasets changed
    std::function<void()> on_scan_failure;  // a listing of the directory failed
  };
  // How old an uncommitted .tmp- file must be before a re-scan removes it.
  static constexpr std::chrono::seconds kLeftoverAge{3600};

  Repository(std::string dir, const Limits& limits, DatasetRegistry* registry, Hooks hooks);
  ~Repository();  // stops polling
  Repository(const Repository&) = delete;
  Repository& operator=(const Repository&) = delete;

  // Checks that the directory exists; then loads every committed dataset that fits the
  // budget (the rest load on demand). A bad file is logged, counted and skipped.
  Status Open();
  // Re-scans every `seconds` (0: never) on a thread of its own.
  void StartPolling(int64_t seconds);
  // One re-scan: loads new datasets that fit, reloads replaced ones, drops deleted ones,
  // removes old leftovers.
  void Poll();

  // Read your writes: loads the committed version of `name`, which the registry lacks.
  // NOT_FOUND when the repository has none (or only a bad file, named in the message).
  Status LoadOnMiss(const std::string& name, std::shared_ptr<const Dataset>* out);
  // True when a committed dataset `name` is in the repository.
  bool Exists(const std::string& name) const;
  // FAILED_PRECONDITION naming --dataset-dir when the directory is not writable.
  Status CheckWritable() const;
  // Commits the sealed upload of `builder` to the repository, then stores it in memory.
  Status CommitUpload(DatasetBuilder* builder, std::shared_ptr<const Dataset>* stored);
  // Removes `name` from the repository and from memory; NOT_FOUND when it is in neither.
  Status Delete(const std::string& name);
  // The committed datasets in the repository that are not in memory, described from their
  // headers (devices empty; sha256 empty for hand-written files until loaded). UNAVAILABLE
  // when the directory cannot be listed (a partial list would claim deletions).
  Status ListNotResident(std::vector<v1::DatasetInfo>* out) const;
  // Removes upload leftovers (IsLeftover) older than `age`; returns how many.
  int CleanLeftovers(std::chrono::seconds age);
  // True when `file` is exactly what CommitUpload names an upload before its commit:
  // NAME.dataset.tmp-<pid>-<16 lowercase hex> with a valid NAME.
  static bool IsLeftover(const std::string& file);

  const std::string& dir() const { return dir_; }

  // A committed dataset on disk: its files and their version.
  struct Entry {
    bool container = false;  // NAME.dataset; else the plain .npy files
    std::string version;     // device, inode, size and mtime of its files
    int64_t file_bytes = 0;  // the files' sizes, headers included
    bool settled = true;     // plain files: the previous re-scan saw this version too
  };
  // A directory listing: one Entry per dataset name, sorted by name (a vector, not a map: a
  // re-scan of 100k names allocates no node per name).
  using Listing = std::vector<std::pair<std::string, Entry>>;

 private:
  // Holds the lock of one dataset name for its lifetime (per-dataset locking).
  class NameGuard {
   public:
    // `wait` false: takes the lock only when it is free (owns() says whether it did).
    NameGuard(const Repository* repo, const std::string& name, bool wait = true);
    ~NameGuard();
    bool owns() const { return owns_; }
    NameGuard(const NameGuard&) = delete;
    NameGuard& operator=(const NameGuard&) = delete;

   private:
    const Repository* repo_;
    std::string name_;
    std::shared_ptr<std::mutex> mu_;
    bool owns_ = false;
  };
  enum class Found { kYes, kNo, kError };  // kError: stat failed other than ENOENT

  Status WriteTemporary(const Dataset& dataset, const std::string& tmp, std::string* version) const;
  Status CommitName(const Dataset& dataset, bool replace, const std::string& tmp,
                    const std::string& final_path) const;
  // Lists the directory into `out`; false (logged once per streak, counted) when the
  // listing, or a stat of a listed name, fails for any reason but the name being gone.
  bool Scan(Listing* out) const;
  Found Stat(const std::string& name, Entry* entry) const;
  Found StatListed(int dir_fd, const std::string& name, unsigned mask, Entry* entry) const;
  // The steps of Poll for one resident dataset and one not resident; true when changed.
  bool PollResident(const std::shared_ptr<const Dataset>& ds, const Entry* scanned);
  bool PollNew(const std::string& name, const Entry& entry);
  // Loads `entry` of `name` and stores it in the registry (replacing what is there). With
  // `evict`, unused datasets make room; without, a dataset that does not fit is left for
  // later (*fits false, OK). Bad files are logged and counted once per version.
  Status Load(const std::string& name, const Entry& entry, bool evict, bool* fits,
              std::shared_ptr<const Dataset>* out);
  // Logs and remembers (once per `version`) that `name`'s files are bad; the status a load
  // of them answers: `code` (NOT_FOUND, or RESOURCE_EXHAUSTED for one over the budget).
  // Whether this version of `name`'s files is known not to load (RecordBadFile).
  bool KnownBad(const std::string& name, const std::string& version) const;
  void ForgetBad(const std::string& name);
  Status RecordBadFile(const std::string& name, const std::string& why, const std::string& version,
                       Code code);
  void PollLoop();

  const std::string dir_;
  Limits limits_;
  DatasetRegistry* registry_;
  Hooks hooks_;
  // Guards bad_ and name_locks_ only (held briefly, never during I/O).
  mutable std::mutex state_mu_;
  std::map<std::string, std::pair<std::string, Status>> bad_;              // name -> (version, why)
  mutable std::map<std::string, std::shared_ptr<std::mutex>> name_locks_;  // NameGuard's
  mutable std::atomic<bool> scan_failing_{false};  // in a streak of failed listings
  std::mutex poll_run_mu_;                         // one Poll at a time; guards last_scan_
  Listing last_scan_;  // the previous re-scan's listing (settling of plain sets)
  // ListNotResident's descriptions by name, valid while the file version is the same (a
  // listing of 100k datasets then opens only the files that changed). nullopt: the version
  // is not listed (a bad file, or over the budget).
  struct ListedInfo {
    std::string version;
    std::optional<v1::DatasetInfo> info;
  };
  mutable std::mutex listed_mu_;  // guards listed_; held for a whole listing
  mutable std::map<std::string, ListedInfo> listed_;

  std::mutex poll_mu_;
  std::condition_variable poll_cv_;
  bool stop_ = false;
  int64_t poll_seconds_ = 0;
  std::thread poller_;
};

}  // namespace gpusampler::server
