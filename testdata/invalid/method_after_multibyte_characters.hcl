listen {
  http = ":8080"
}

route "r" {
  path     = "/a"
  methods  = ["ÜÜÜ", "B@D"]
  upstream = "http://127.0.0.1:9000"
}
