//! oxccl-kernels: the arithmetic of collectives.
