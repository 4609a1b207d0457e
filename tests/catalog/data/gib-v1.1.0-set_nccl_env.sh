# NCCL settings of set_nccl_env.sh in the gIB NCCL plugin v1.1.0
# (us-docker.pkg.dev/gce-ai-infra/gpudirect-gib/nccl-plugin-gib:v1.1.0, installed on A3
# Ultra nodes at /home/kubernetes/bin/gib/scripts/set_nccl_env.sh).
#
# The script ships only inside the image. These values are as Google publishes them "to
# match what is in /usr/local/gib/scripts/set_nccl_env.sh" for v1.1.0:
#   https://github.com/GoogleCloudPlatform/cluster-toolkit/blob/1047080375afbb44da4b596be314634e7486af4a/examples/machine-learning/a3-ultragpu-8g/nemo-framework/Dockerfile
# CI (.github/workflows/images.yaml, job gib-env) runs the same test against the script
# extracted from the pinned image (GIB_SET_NCCL_ENV=<path>).
export NCCL_NET=gIB
export NCCL_CROSS_NIC=0
export NCCL_NET_GDR_LEVEL=PIX
export NCCL_P2P_NET_CHUNKSIZE=131072
export NCCL_NVLS_CHUNKSIZE=524288
export NCCL_IB_ADAPTIVE_ROUTING=1
export NCCL_IB_QPS_PER_CONNECTION=4
export NCCL_IB_TC=52
export NCCL_IB_FIFO_TC=84
export NCCL_TUNER_CONFIG_PATH=/usr/local/gib/configs/tuner_config_a3u.txtpb
