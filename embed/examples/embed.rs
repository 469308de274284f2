//! Times the model: `cargo run --release -p amos-embed --example embed -- [--model DIR] TEXT...`
//! prints how long loading took, the time per embedding, and each text's
//! cosine to the first. A measuring tool, not a test.

use std::time::Instant;

use amos_embed::{StaticModel, cosine};

fn main() -> Result<(), amos_embed::ModelError> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let dir = match args.iter().position(|a| a == "--model") {
        Some(i) if i + 1 < args.len() => {
            let dir = args.remove(i + 1);
            args.remove(i);
            Some(dir)
        }
        _ => None,
    };
    let start = Instant::now();
    let owned;
    let model = match &dir {
        Some(d) => {
            owned = StaticModel::from_dir(std::path::Path::new(d))?;
            &owned
        }
        None => StaticModel::default_model(),
    };
    let load = start.elapsed();
    println!(
        "model {} ({} tokens x {} dims) loaded in {:.2} ms",
        model.name(),
        model.vocab_size(),
        model.dim(),
        load.as_secs_f64() * 1e3
    );
    if args.is_empty() {
        return Ok(());
    }
    let rounds = 2000;
    let start = Instant::now();
    for _ in 0..rounds {
        for t in &args {
            std::hint::black_box(model.embed(t));
        }
    }
    let per = start.elapsed().as_secs_f64() / f64::from(rounds) / args.len() as f64;
    println!(
        "embed: {:.1} µs per text (mean over {rounds} rounds)",
        per * 1e6
    );
    let first = model.embed(&args[0]);
    for t in &args {
        println!("{:6.3}  {t}", cosine(&first, &model.embed(t)));
    }
    Ok(())
}
