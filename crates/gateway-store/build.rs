//! `sqlx::migrate!` embeds the migration files when this crate compiles; cargo does not know it
//! read them. Without this, a new migration file would not be built in until something else
//! changed.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
