route "files" {
  path     = "/files"
  upstream = "ftp://files.internal"
}

route "bare" {
  path     = "/bare"
  upstream = "127.0.0.1:9000"
}
