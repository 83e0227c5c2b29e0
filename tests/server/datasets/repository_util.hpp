// Helpers of the repository and dataset hostile-client suites (split from
// repository_test.cc): a temporary directory, its files, labels, plain and uploaded
// datasets, and a request by dataset name. Header-only.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "datasets/datasets.hpp"
#include "datasets/repository.hpp"
#include "gpusampler/client/npy.hpp"
#include "gpusampler/kernels/device.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {

inline std::string TempDir() {
  char tmpl[] = "/tmp/gpusampler-repo-XXXXXX";
  return mkdtemp(tmpl);
}

inline std::set<std::string> Files(const std::string& dir) {
  std::set<std::string> out;
  DIR* d = opendir(dir.c_str());
  while (dirent* e = readdir(d)) {
    const std::string f = e->d_name;
    if (f != "." && f != "..") out.insert(f);
  }
  closedir(d);
  return out;
}

inline v1::Tensor Labels(int64_t n, uint64_t seed) {
  const std::vector<int64_t> row = RandomRow(n, seed);
  v1::Tensor t;
  t.set_dtype(v1::DTYPE_INT64);
  t.add_shape(n);
  t.set_data(std::string(reinterpret_cast<const char*>(row.data()), row.size() * 8));
  return t;
}

// Writes NAME.labels.npy the way a careful pipeline does: another name, then rename.
inline void WritePlain(const std::string& dir, const std::string& name, const v1::Tensor& labels) {
  const std::string tmp = dir + "/." + name + ".partial";
  ASSERT_EQ(client::WriteNpy(tmp, labels), "");
  ASSERT_EQ(rename(tmp.c_str(), (dir + "/" + name + ".labels.npy").c_str()), 0);
}

inline grpc::Status Upload(v1::Sampler::Stub* stub, const std::string& name,
                           const v1::Tensor& labels, bool replace, v1::DatasetInfo* info) {
  grpc::ClientContext ctx;
  auto writer = stub->CreateDataset(&ctx, info);
  const int64_t n = labels.shape(0);
  for (int64_t at = 0; at < n; at += 1000) {
    const int64_t m = std::min<int64_t>(1000, n - at);
    v1::DatasetChunk c;
    if (at == 0) {
      c.set_name(name);
      c.set_replace(replace);
    }
    c.mutable_labels()->set_dtype(v1::DTYPE_INT64);
    c.mutable_labels()->add_shape(m);
    c.mutable_labels()->set_data(labels.data().substr(at * 8, m * 8));
    writer->Write(c);
  }
  writer->WritesDone();
  return writer->Finish();
}

inline v1::SampleRequest ByName(const std::string& name) {
  v1::SampleRequest req;
  req.set_dataset(name);
  req.mutable_spec()->set_num_samples(32);
  req.set_seed(11);
  return req;
}

}  // namespace gpusampler::server::testing
