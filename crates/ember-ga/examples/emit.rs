//! Prints generated code: `cargo run -p ember-ga --example emit -- 3,0,1 wgp [--grad] [cuda|rust|ir]`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let algebra = args.first().map(String::as_str).unwrap_or("2,0");
    let expr = args.get(1).map(String::as_str).unwrap_or("wgp");
    let grad = args.iter().any(|a| a == "--grad");
    let lang = args.iter().skip(2).find(|a| !a.starts_with("--")).map(String::as_str).unwrap_or("cuda");
    let result = lang.parse().and_then(|lang| ember_ga::emit::emit(algebra, expr, grad, lang));
    match result {
        Ok(e) => {
            println!("{}", e.code);
            eprintln!("{}: {} muls / {} adds", e.name, e.muls, e.adds);
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
