admin {
  token = "an-admin-token-in-the-file"
}
route "r" {
  path     = "/"
  upstream = "http://127.0.0.1:1"
}
