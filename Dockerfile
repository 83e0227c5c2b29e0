# gpusampler container image. Both stages install their packages with the same
# deploy/install-deps.sh that CI runs, so the image and CI cannot drift apart.
#
#   CPU image:   docker build --build-arg GPUSAMPLER_REVISION="$(git describe --always --dirty)" \
#                  -t gpusampler .
#   GPU image:   docker build -t gpusampler:cuda --build-arg CUDA_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04 .
#                docker run --gpus all -p 50051:50051 -p 9464:9464 gpusampler:cuda
#   podman:      podman build --format docker ... (OCI format drops HEALTHCHECK)
#
# The CUDA toolkit is copied from CUDA_IMAGE into the builder only; the CUDA runtime is linked
# statically and the driver is injected by the NVIDIA container runtime, so the runtime image
# stays plain Debian and the same image serves on CPU when no GPU is visible.
# deploy/container/test.sh builds and checks this image (`make test-container`, run in CI).
ARG CUDA_IMAGE=
ARG DEBIAN_IMAGE=debian:12

FROM ${DEBIAN_IMAGE} AS cuda-none
RUN mkdir -p /usr/local/cuda

FROM ${CUDA_IMAGE:-cuda-none} AS cuda

FROM ${DEBIAN_IMAGE} AS build
COPY deploy/install-deps.sh /src/deploy/install-deps.sh
RUN bash /src/deploy/install-deps.sh --build && rm -rf /var/lib/apt/lists/*
COPY --from=cuda /usr/local/cuda /usr/local/cuda
COPY . /src
WORKDIR /src
# .git is not in the build context: the revision comes in as a build argument.
ARG GPUSAMPLER_REVISION=unknown
# The GPU image's architectures (docs/operations.md, "Supported GPUs"): SASS for Turing (sm_75)
# to Blackwell (sm_100, sm_120) and compute_120 PTX for what comes after; CI and the default
# build keep the short list (sm_80/89/90 + compute_90). Ignored by the CPU image.
ARG CUDA_ARCHITECTURES="75-real;80-real;86-real;89-real;90-real;100-real;120-real;120"
# Only the two shipped binaries are built (no tests, benchmarks or Python stubs).
RUN cmake --preset release -DGPUSAMPLER_BUILD_TESTS=OFF \
      -DGPUSAMPLER_REVISION="${GPUSAMPLER_REVISION}" \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
 && cmake --build build -j "$(nproc)" --target gpusampler_server gpusampler-cli \
 && mkdir -p /opt/gpusampler/bin \
 && cp build/bin/gpusampler-server build/bin/gpusampler-cli /opt/gpusampler/bin/ \
 && strip /opt/gpusampler/bin/* \
 && cp deploy/container/healthcheck.sh /opt/gpusampler/bin/gpusampler-healthcheck

FROM ${DEBIAN_IMAGE} AS runtime
# No documentation, manual pages or translations from the runtime packages.
COPY deploy/container/dpkg-slim.cfg /etc/dpkg/dpkg.cfg.d/gpusampler-slim
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/install-deps.sh \
 && groupadd --system --gid 10001 gpusampler \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin gpusampler
COPY --from=build /opt/gpusampler/bin/ /usr/local/bin/
# Numeric, so that Kubernetes can verify runAsNonRoot.
USER 10001:10001
# The port file (written once SERVING) tells the HEALTHCHECK which ports the server listens
# on, whatever --metrics-address or GPUSAMPLER_METRICS_ADDRESS says: it asks GET /readyz on
# the metrics port, plain HTTP also when gRPC serves TLS or mTLS; /tmp is the one writable
# path needed (an emptyDir under a read-only root filesystem). NVIDIA_DRIVER_CAPABILITIES:
# the container toolkit mounts libcuda (compute) and NVML (utility) only when asked.
# CUDA_CACHE_PATH: the driver's PTX JIT cache (a GPU newer than the SASS in the image) must be
# writable; the default, under $HOME, is not under a read-only root.
ENV GPUSAMPLER_ADDRESS=0.0.0.0:50051 \
    GPUSAMPLER_METRICS_ADDRESS=0.0.0.0:9464 \
    GPUSAMPLER_DEVICE=auto \
    GPUSAMPLER_LOG_FORMAT=json \
    GPUSAMPLER_PORT_FILE=/tmp/gpusampler.ports \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    CUDA_CACHE_PATH=/tmp/gpusampler-cuda-cache
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
  CMD ["gpusampler-healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["gpusampler-server"]
