use std::time::Instant;
fn main() {
    let dir = std::env::args().nth(1).unwrap();
    for _ in 0..3 {
        let t = Instant::now();
        let db = tsbucket::Database::open(&dir).unwrap();
        println!("reopen {:.3} s", t.elapsed().as_secs_f64());
        db.close().unwrap();
    }
}
