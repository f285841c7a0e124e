admin {
  token = env("GATEWAY_TEST_SHORT_ADMIN_TOKEN", "short")
}
route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:1"
}
