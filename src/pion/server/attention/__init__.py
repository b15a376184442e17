"""Attention kernels the ATTEND.PREFIX.* family runs on resident K/V.

``dense`` wraps torch's CPU flash kernel (output + log-sum-exp) with a matmul fallback,
``sparse`` attends over gathered key subsets (caller indices, top-k, block-mean top-K),
``merge`` joins two partial attentions by their log-sum-exp. torch is imported by these
modules only: the command family imports them lazily, so a server that never sees an
ATTEND command never loads torch.
"""
