//! Recall on the node: search, context packs and feedback (`impl Node`).
