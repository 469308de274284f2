//! The mesh bench's report as JSON, as `amos --json bench --mesh N` prints it
//! (the same `amos_sim::bench::run`), without building the node:
//! `cargo run --release -p amos-sim --example mesh -- N [DEGREE] [SEED]`.

fn main() {
    let arg = |i: usize, default: u64| -> u64 {
        std::env::args()
            .nth(i)
            .map(|a| a.parse().unwrap_or_else(|_| panic!("not a number: {a}")))
            .unwrap_or(default)
    };
    let (nodes, degree, seed) = (arg(1, 50), arg(2, 4), arg(3, 1));
    let bench = amos_sim::bench::MeshBench::new(nodes as usize, degree as usize, seed);
    let report = amos_sim::bench::run(&bench);
    println!(
        "{}",
        serde_json::to_string_pretty(&report).expect("a report serialises")
    );
}
