#[test]
fn smoke() {
    let r = amos_sim::bench::run(&amos_sim::bench::MeshBench::new(20, 4, 1));
    eprintln!("{r:#?}");
}
