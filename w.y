Running 6s test @ http://127.0.0.1:18260/v2/models/mlp/infer
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.90ms  430.26us   6.32ms   82.46%
    Req/Sec    18.07k     2.22k   29.66k    93.33%
  107929 requests in 6.00s, 36.54MB read
Requests/sec:  17977.82
Transfer/sec:      6.09MB
