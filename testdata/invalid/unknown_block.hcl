listen {
  http = ":8080"
}

backend "legacy" {
  url = "http://127.0.0.1:9000"
}
