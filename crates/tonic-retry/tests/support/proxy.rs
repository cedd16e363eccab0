//! A loopback TCP proxy that mistreats its first connections and forwards
//! the rest whole: a connection that dies before or during a call, then a
//! retry that gets through.

use std::future::Future;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// Listens on a loopback port: each of the first `first` connections is
/// handed to `mistreat` (on its own task), every later one is forwarded to
/// `upstream` byte for byte. The proxy's address.
pub async fn proxy_after<F, Fut>(upstream: SocketAddr, first: u32, mistreat: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut down, _)) = listener.accept().await {
            n += 1;
            if n <= first {
                tokio::spawn(mistreat(down));
                continue;
            }
            tokio::spawn(async move {
                if let Ok(mut up) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
            });
        }
    });
    addr
}
