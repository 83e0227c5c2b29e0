# gpusampler container image. Both stages install their packages with the same
# deploy/install-deps.sh that CI runs, so the image and CI cannot drift apart.
#
#   CPU image:   docker build -t gpusampler .
#   GPU image:   docker build -t gpusampler:cuda --build-arg CUDA_IMAGE=nvidia/cuda:13.0.1-devel-ubuntu24.04 .
#                docker run --gpus all -p 50051:50051 -p 9464:9464 gpusampler:cuda
#
# The CUDA toolkit is copied from CUDA_IMAGE into the builder only; the CUDA runtime is linked
# statically and the driver is injected by the NVIDIA container runtime, so the runtime image
# stays plain Debian and the same image serves on CPU when no GPU is visible.
ARG CUDA_IMAGE=
ARG DEBIAN_IMAGE=debian:12

FROM ${DEBIAN_IMAGE} AS cuda-none
RUN mkdir -p /usr/local/cuda

FROM ${CUDA_IMAGE:-cuda-none} AS cuda

FROM ${DEBIAN_IMAGE} AS build
COPY deploy/install-deps.sh /src/deploy/install-deps.sh
RUN bash /src/deploy/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY --from=cuda /usr/local/cuda /usr/local/cuda
COPY . /src
WORKDIR /src
RUN cmake --preset release -DGPUSAMPLER_BUILD_TESTS=OFF \
 && cmake --build build -j "$(nproc)" \
 && mkdir -p /opt/gpusampler/bin \
 && cp build/bin/gpusampler-server build/bin/gpusampler-cli /opt/gpusampler/bin/

FROM ${DEBIAN_IMAGE} AS runtime
COPY deploy/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && useradd --system --uid 10001 gpusampler
COPY --from=build /opt/gpusampler/bin/ /usr/local/bin/
USER gpusampler
ENV GPUSAMPLER_ADDRESS=0.0.0.0:50051 \
    GPUSAMPLER_METRICS_ADDRESS=0.0.0.0:9464 \
    GPUSAMPLER_DEVICE=auto \
    GPUSAMPLER_LOG_FORMAT=json
EXPOSE 50051 9464
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s \
  CMD ["gpusampler-cli", "--target", "127.0.0.1:50051", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["gpusampler-server"]
