//! oxccl base layer
