listen {
  http = ":8080"
}

upstream "legacy" {
  url = "http://127.0.0.1:9000"
}
