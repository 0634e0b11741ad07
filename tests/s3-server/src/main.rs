//! `bertpipe-s3-test-server ROOT ACCESS_KEY SECRET_KEY [FAULT_FILE]`: serves ROOT as S3 on
//! 127.0.0.1 (a free port, printed as the first line of stdout; buckets are ROOT's
//! sub-folders) until stdin closes. While FAULT_FILE holds a string, every PUT whose path
//! contains it fails with HTTP 500 — an upload interrupted on the server's side.

use std::path::PathBuf;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::service::S3ServiceBuilder;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: bertpipe-s3-test-server ROOT ACCESS_KEY SECRET_KEY [FAULT_FILE]");
        std::process::exit(2);
    }
    let fault: Option<PathBuf> = args.get(4).map(PathBuf::from);
    let fs = s3s_fs::FileSystem::new(&args[1]).expect("a folder to serve");
    let mut builder = S3ServiceBuilder::new(fs);
    builder.set_auth(s3s::auth::SimpleAuth::from_single(args[2].clone(), args[3].clone()));
    let service = builder.build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a loopback port");
    println!("{}", listener.local_addr().expect("bound").port());
    // The test holds our stdin: when it goes (test over, or crashed), so do we.
    std::thread::spawn(|| {
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new());
        std::process::exit(0);
    });
    loop {
        let Ok((socket, _)) = listener.accept().await else { continue };
        let (service, fault) = (service.clone(), fault.clone());
        let handler = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
            let (service, fault) = (service.clone(), fault.clone());
            async move {
                let marker = fault.as_ref().and_then(|f| std::fs::read_to_string(f).ok()).filter(|m| !m.is_empty());
                if req.method() == http::Method::PUT && marker.is_some_and(|m| req.uri().path().contains(m.trim())) {
                    let resp = http::Response::builder().status(500).body(s3s::Body::empty()).expect("a response");
                    return Ok::<_, s3s::HttpError>(resp);
                }
                hyper::service::Service::call(&service, req).await
            }
        });
        tokio::spawn(async move {
            let _ = ConnBuilder::new(TokioExecutor::new()).serve_connection(TokioIo::new(socket), handler).await;
        });
    }
}
