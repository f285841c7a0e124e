listen {
  http    = ":8080"
  timeout = "5s"
}
