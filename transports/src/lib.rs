//! oxccl-transports: moving bytes between two ranks.
