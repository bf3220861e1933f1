//! The network transport interface, shaped like NCCL's net plugin API (v8–v10), and its
//! implementations: [`socket`] (TCP) and, behind the `ibverbs` feature, `ib`.
