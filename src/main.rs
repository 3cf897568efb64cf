fn main() {
    consul_elector::install_crypto_provider();
}
