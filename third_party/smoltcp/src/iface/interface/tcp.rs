use super::*;

use crate::iface::socket_set::FlowKey;
use crate::socket::tcp::Socket;

impl InterfaceInner {
    pub(crate) fn process_tcp<'frame>(
        &mut self,
        sockets: &mut SocketSet,
        handled_by_raw_socket: bool,
        ip_repr: IpRepr,
        ip_payload: &'frame [u8],
    ) -> Option<Packet<'frame>> {
        self.process_tcp_with(
            sockets,
            handled_by_raw_socket,
            ip_repr,
            ip_payload,
            &mut |_, _| 0,
        )
    }

    /// dpwarp: with the payload offered to `direct` first
    /// ([`Interface::poll_ingress_single_with`]).
    pub(crate) fn process_tcp_with<'frame>(
        &mut self,
        sockets: &mut SocketSet,
        handled_by_raw_socket: bool,
        ip_repr: IpRepr,
        ip_payload: &'frame [u8],
        direct: &mut DirectReceive<'_>,
    ) -> Option<Packet<'frame>> {
        let (src_addr, dst_addr) = (ip_repr.src_addr(), ip_repr.dst_addr());

        // Per RFC 1122 §3.2.1.3, the unspecified address must never appear as a source
        // or destination in any IP datagram. Drop such TCP segments early to avoid
        // creating sockets with unspecified peers (which would later panic on egress).
        // This is not done at the iface level because it might be useful with
        // UDP or raw sockets, but it's definitely not useful for TCP.
        if src_addr.is_unspecified() || dst_addr.is_unspecified() {
            return None;
        }

        let tcp_packet = check!(TcpPacket::new_checked(ip_payload));
        let tcp_repr = check!(TcpRepr::parse(
            &tcp_packet,
            &src_addr,
            &dst_addr,
            &self.caps.checksum
        ));

        // dpwarp: the socket of the segment's flow, found through the flow
        // index if it is there (and still accepts it), else by a walk over
        // every socket; it is woken (it may have an ACK to send) and noted
        // as changed.
        let flow = FlowKey {
            local: dst_addr,
            local_port: tcp_repr.dst_port,
            remote: src_addr,
            remote_port: tcp_repr.src_port,
        };
        let mut found = None;
        #[cfg(feature = "alloc")]
        if let Some(&index) = sockets.schedule.flows.get(&flow) {
            if let Some(item) = sockets.item_mut(index) {
                if let Some(tcp_socket) = Socket::downcast_mut(&mut item.socket) {
                    if tcp_socket.accepts(self, &ip_repr, &tcp_repr) {
                        found = Some(index);
                    }
                }
            }
        }
        if found.is_none() {
            for item in sockets.items_mut() {
                if let Some(tcp_socket) = Socket::downcast_mut(&mut item.socket) {
                    if tcp_socket.accepts(self, &ip_repr, &tcp_repr) {
                        found = Some(item.meta.handle.index());
                        break;
                    }
                }
            }
        }
        if let Some(index) = found {
            sockets.wake(index);
            sockets.note_changed(index);
            let mut reply = None;
            #[allow(unused_mut)]
            let mut indexed = false;
            if let Some(item) = sockets.item_mut(index) {
                if let Some(tcp_socket) = Socket::downcast_mut(&mut item.socket) {
                    let handle = item.meta.handle;
                    reply = tcp_socket
                        .process_with(self, &ip_repr, &tcp_repr, &mut |octets| {
                            direct(handle, octets)
                        })
                        .map(|(ip, tcp)| Packet::new(ip, IpPayload::Tcp(tcp)));
                    // A listener that took a SYN is now this flow's socket.
                    indexed = tcp_socket.local_endpoint().map(|e| (e.addr, e.port))
                        == Some((flow.local, flow.local_port))
                        && tcp_socket.remote_endpoint().map(|e| (e.addr, e.port))
                            == Some((flow.remote, flow.remote_port));
                }
            }
            #[cfg(feature = "alloc")]
            if indexed {
                sockets.index_flow(index, flow);
            }
            return reply;
        }

        if tcp_repr.control == TcpControl::Rst
            || ip_repr.dst_addr().is_unspecified()
            || ip_repr.src_addr().is_unspecified()
            || handled_by_raw_socket
        {
            // Never reply to a TCP RST packet with another TCP RST packet.
            // Never send a TCP RST packet with unspecified addresses.
            // Never send a TCP RST when packet has been handled by raw socket.
            None
        } else {
            // The packet wasn't handled by a socket, send a TCP RST packet.
            let (ip, tcp) = tcp::Socket::rst_reply(&ip_repr, &tcp_repr);
            Some(Packet::new(ip, IpPayload::Tcp(tcp)))
        }
    }
}
