route "orders.read" {
  path     = "/orders"
  upstream = "http://deploy:s3cret@10.0.0.11:9000"
}
