route "orders.read" {
  path     = "/orders"
  upstream = env("GATEWAY_TEST_UNSET_VARIABLE")
}
