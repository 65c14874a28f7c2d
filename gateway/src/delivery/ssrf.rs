//! The SSRF guard's classifier: which IP addresses the gateway refuses to contact.
//!
//! Endpoint URLs come from configuration, but the names in them resolve wherever their DNS
//! says, and a webhook gateway that follows them blindly becomes a proxy into the network it
//! runs in (cloud metadata at 169.254.169.254, admin panels on 10/8, the gateway's own API on
//! loopback). So every address is judged *after* resolution, and only addresses that are
//! publicly routable — or explicitly allowed by `delivery.allow_networks` — may be contacted.
//!
//! IPv6 forms that carry an IPv4 address inside them (IPv4-mapped, IPv4-compatible,
//! IPv4-translated, NAT64 `64:ff9b::/96`, 6to4 `2002::/16`) are judged by the embedded IPv4
//! address, because that is where the packets end up. Teredo (`2001::/32`) is refused as a
//! whole: its client address is obfuscated (XOR'ed) and its server address is a relay, the
//! protocol is obsolete, and no legitimate webhook receiver sits behind it.
//!
//! Pure code: no I/O, no DNS. The connector (`super::connector`) applies it to every resolved
//! address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

const METADATA_V4: Ipv4Addr = Ipv4Addr::new(169, 254, 169, 254);

/// IPv4 ranges that are never publicly routable, most specific first where they overlap.
const BLOCKED_V4: &[(Ipv4Net, &str)] = &[
    (v4(0, 0, 0, 0, 8), "unspecified (\"this network\", 0.0.0.0/8)"),
    (v4(10, 0, 0, 0, 8), "private network (RFC 1918)"),
    (
        v4(100, 64, 0, 0, 10),
        "shared address space (CGNAT, 100.64.0.0/10)",
    ),
    (v4(127, 0, 0, 0, 8), "loopback"),
    (v4(169, 254, 0, 0, 16), "link-local"),
    (v4(172, 16, 0, 0, 12), "private network (RFC 1918)"),
    (v4(192, 0, 0, 0, 24), "IETF protocol assignments (192.0.0.0/24)"),
    (v4(192, 0, 2, 0, 24), "documentation (TEST-NET-1)"),
    (v4(192, 168, 0, 0, 16), "private network (RFC 1918)"),
    (v4(198, 18, 0, 0, 15), "benchmarking (198.18.0.0/15)"),
    (v4(198, 51, 100, 0, 24), "documentation (TEST-NET-2)"),
    (v4(203, 0, 113, 0, 24), "documentation (TEST-NET-3)"),
    (v4(224, 0, 0, 0, 4), "multicast"),
    (v4(255, 255, 255, 255, 32), "broadcast"),
    (v4(240, 0, 0, 0, 4), "reserved (240.0.0.0/4)"),
];

/// IPv6 ranges refused outright (the IPv4-embedding forms are handled before this table).
const BLOCKED_V6: &[(Ipv6Net, &str)] = &[
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        "local-use NAT64 (64:ff9b:1::/48)",
    ),
    (v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "discard-only (100::/64)"),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), "Teredo tunnel (2001::/32)"),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        "documentation (2001:db8::/32)",
    ),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "unique-local (fc00::/7)"),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    (
        v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        "site-local (deprecated, fec0::/10)",
    ),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
];

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix_len: u8) -> Ipv4Net {
    Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), prefix_len)
}

const fn v6(s: [u16; 8], prefix_len: u8) -> Ipv6Net {
    Ipv6Net::new_assert(
        Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        prefix_len,
    )
}

/// Why an address may not be contacted, or `None` when it is publicly routable.
///
/// Covers loopback, unspecified, RFC 1918, link-local (with the cloud metadata address named
/// on its own), CGNAT, 192.0.0.0/24, benchmarking, documentation, multicast, reserved and
/// broadcast for IPv4; loopback, unspecified, unique-local, link-local, site-local, multicast,
/// discard-only, documentation, local-use NAT64 and Teredo for IPv6; and the IPv6 forms that
/// embed an IPv4 address, judged by that address (see the module doc).
pub fn blocked_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => blocked_reason_v4(v4),
        IpAddr::V6(v6) => blocked_reason_v6(v6),
    }
}

fn blocked_reason_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip == METADATA_V4 {
        return Some("cloud metadata service (169.254.169.254)");
    }
    BLOCKED_V4
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, reason)| *reason)
}

fn blocked_reason_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip == Ipv6Addr::UNSPECIFIED {
        return Some("unspecified (::)");
    }
    if ip == Ipv6Addr::LOCALHOST {
        return Some("loopback");
    }
    if let Some(embedded) = embedded_ipv4(ip) {
        return blocked_reason_v4(embedded);
    }
    BLOCKED_V6
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, reason)| *reason)
}

/// The IPv4 address an IPv6 address stands for, when it is one of the embedding forms:
/// IPv4-mapped `::ffff:a.b.c.d`, IPv4-translated `::ffff:0:a.b.c.d`, IPv4-compatible
/// `::a.b.c.d` (except `::` and `::1`, which are IPv6's own unspecified and loopback),
/// NAT64 `64:ff9b::a.b.c.d` and 6to4 `2002:aabb:ccdd::/48`.
pub fn embedded_ipv4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let low32 = Ipv4Addr::from(((s[6] as u32) << 16) | s[7] as u32);
    match s {
        [0, 0, 0, 0, 0, 0xffff, _, _] => Some(low32),
        [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low32),
        [0, 0, 0, 0, 0, 0, 0, 0] | [0, 0, 0, 0, 0, 0, 0, 1] => None,
        [0, 0, 0, 0, 0, 0, _, _] => Some(low32),
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] => Some(low32),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::from(((hi as u32) << 16) | lo as u32)),
        _ => None,
    }
}

/// `Ok` when `ip` may be contacted: it is not blocked, or it lies inside one of `allow`.
///
/// An address embedding an IPv4 address is also allowed when the embedded address lies in an
/// IPv4 allow entry, so allowing `127.0.0.0/8` allows `::ffff:127.0.0.1` too. The reverse does
/// not hold: `127.0.0.0/8` does not allow `::1`, which needs its own `::1/128` entry.
pub fn check(ip: IpAddr, allow: &[IpNet]) -> Result<(), &'static str> {
    if allow.iter().any(|net| net.contains(&ip)) {
        return Ok(());
    }
    if let IpAddr::V6(v6) = ip
        && let Some(embedded) = embedded_ipv4(v6)
        && allow.iter().any(|net| net.contains(&IpAddr::V4(embedded)))
    {
        return Ok(());
    }
    match blocked_reason(ip) {
        Some(reason) => Err(reason),
        None => Ok(()),
    }
}

/// Judges the host of an endpoint URL, whatever its scheme, when it is an IP literal
/// (`10.0.0.1`, `[::1]`): the address and why it may not be contacted, or `None` when it may
/// (or when the host is a name: names are judged after they resolve, at every attempt).
///
/// The config file and the API judge an endpoint with this when they read it, so that an
/// address no attempt could ever reach is refused there, with its reason, instead of failing
/// every attempt with `blocked_address`.
pub fn blocked_literal(host: &str, allow: &[IpNet]) -> Option<(IpAddr, &'static str)> {
    let literal = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: IpAddr = literal.parse().ok()?;
    check(ip, allow).err().map(|reason| (ip, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn every_non_public_range_is_blocked_with_its_reason() {
        let table: &[(&str, &str)] = &[
            // IPv4
            ("127.0.0.1", "loopback"),
            ("127.255.255.254", "loopback"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("10.0.0.1", "RFC 1918"),
            ("10.255.255.255", "RFC 1918"),
            ("172.16.0.1", "RFC 1918"),
            ("172.31.255.255", "RFC 1918"),
            ("192.168.1.1", "RFC 1918"),
            ("169.254.0.1", "link-local"),
            ("169.254.169.254", "metadata"),
            ("100.64.0.1", "CGNAT"),
            ("100.127.255.255", "CGNAT"),
            ("192.0.0.8", "192.0.0.0/24"),
            ("192.0.2.1", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.255", "benchmarking"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("255.255.255.255", "broadcast"),
            // IPv6 proper
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fc00::1", "unique-local"),
            ("fd12:3456:789a::1", "unique-local"),
            ("fd00:ec2::254", "unique-local"),
            ("fe80::1", "link-local"),
            ("febf:ffff::1", "link-local"),
            ("fec0::1", "site-local"),
            ("ff02::1", "multicast"),
            ("ff05::2", "multicast"),
            ("100::1", "discard"),
            ("2001:db8::1", "documentation"),
            ("64:ff9b:1::a00:1", "NAT64"),
            // Teredo: the whole prefix, whatever it embeds
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
            ("2001::1", "Teredo"),
            // IPv6 forms embedding a blocked IPv4 address
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.1.2.3", "RFC 1918"),
            ("::ffff:169.254.169.254", "metadata"),
            ("::ffff:0:192.168.0.1", "RFC 1918"),
            ("::127.0.0.1", "loopback"),
            ("::10.0.0.1", "RFC 1918"),
            ("64:ff9b::127.0.0.1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("64:ff9b::100.64.0.1", "CGNAT"),
            ("2002:7f00:1::", "loopback"),
            ("2002:a00:1::1", "RFC 1918"),
            ("2002:c0a8:101::42", "RFC 1918"),
            ("2002:a9fe:a9fe::", "metadata"),
        ];
        for (addr, fragment) in table {
            let reason =
                blocked_reason(ip(addr)).unwrap_or_else(|| panic!("{addr} should be blocked ({fragment})"));
            assert!(
                reason.contains(fragment),
                "{addr}: reason {reason:?} should mention {fragment:?}"
            );
            assert_eq!(check(ip(addr), &[]), Err(reason), "{addr}");
        }
    }

    #[test]
    fn public_addresses_pass_including_their_embedded_forms() {
        // Classified only; nothing here is ever contacted.
        for addr in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "172.15.255.255",
            "172.32.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "169.253.255.255",
            "192.0.1.1",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001:80b::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::1.1.1.1",
            "2002:808:808::1",
        ] {
            assert_eq!(blocked_reason(ip(addr)), None, "{addr} should pass");
            assert_eq!(check(ip(addr), &[]), Ok(()), "{addr}");
        }
    }

    #[test]
    fn allow_list_exempts_exactly_its_networks() {
        let allow = nets(&["127.0.0.0/8", "10.1.0.0/16"]);
        assert_eq!(check(ip("127.0.0.1"), &allow), Ok(()));
        assert_eq!(check(ip("127.3.2.1"), &allow), Ok(()));
        assert_eq!(check(ip("10.1.200.3"), &allow), Ok(()));
        assert!(check(ip("10.2.0.1"), &allow).is_err());
        assert!(check(ip("192.168.0.1"), &allow).is_err());
        assert!(check(ip("169.254.169.254"), &allow).is_err());
        // IPv6 loopback is its own range: 127.0.0.0/8 does not open it.
        assert_eq!(check(ip("::1"), &allow), Err("loopback"));
        assert_eq!(check(ip("::1"), &nets(&["::1/128"])), Ok(()));
    }

    #[test]
    fn an_ipv4_allow_entry_also_allows_the_ipv6_forms_embedding_it() {
        let allow = nets(&["127.0.0.0/8"]);
        for addr in [
            "::ffff:127.0.0.1",
            "::ffff:0:127.0.0.1",
            "::127.0.0.1",
            "64:ff9b::127.0.0.1",
            "2002:7f00:1::1",
        ] {
            assert_eq!(check(ip(addr), &allow), Ok(()), "{addr}");
        }
        assert!(check(ip("::ffff:10.0.0.1"), &allow).is_err());
    }

    #[test]
    fn embedded_ipv4_is_extracted_from_each_form() {
        let e = |s: &str| match ip(s) {
            IpAddr::V6(v6) => embedded_ipv4(v6),
            IpAddr::V4(_) => unreachable!(),
        };
        let want = Some(Ipv4Addr::new(192, 168, 1, 2));
        assert_eq!(e("::ffff:192.168.1.2"), want);
        assert_eq!(e("::ffff:0:192.168.1.2"), want);
        assert_eq!(e("::192.168.1.2"), want);
        assert_eq!(e("64:ff9b::192.168.1.2"), want);
        assert_eq!(e("2002:c0a8:102:1::5"), want);
        assert_eq!(e("::"), None);
        assert_eq!(e("::1"), None);
        assert_eq!(e("2606:4700::1111"), None);
        assert_eq!(e("2001:0:4136:e378:8000:63bf:3fff:fdd2"), None);
    }

    proptest::proptest! {
        #[test]
        fn embedded_forms_are_judged_exactly_like_their_ipv4_address(bits in proptest::num::u32::ANY) {
            let v4 = Ipv4Addr::from(bits);
            let want = blocked_reason(IpAddr::V4(v4));
            let [a, b, c, d] = v4.octets();
            let hi = u16::from_be_bytes([a, b]);
            let lo = u16::from_be_bytes([c, d]);
            let forms = [
                v4.to_ipv6_mapped(),
                Ipv6Addr::new(0, 0, 0, 0, 0xffff, 0, hi, lo),
                Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, hi, lo),
                Ipv6Addr::new(0x2002, hi, lo, 0x1234, 0, 0, 0, 1),
            ];
            for form in forms {
                proptest::prop_assert_eq!(blocked_reason(IpAddr::V6(form)), want, "{}", form);
            }
        }
    }

    #[test]
    fn a_urls_host_is_judged_when_it_is_an_ip_literal_and_left_to_resolution_when_a_name() {
        let allow = nets(&["127.0.0.0/8"]);
        assert_eq!(
            blocked_literal("10.0.0.1", &allow),
            Some((ip("10.0.0.1"), "private network (RFC 1918)"))
        );
        assert_eq!(blocked_literal("[::1]", &allow), Some((ip("::1"), "loopback")));
        assert_eq!(
            blocked_literal("[::ffff:169.254.169.254]", &allow).map(|(_, why)| why),
            Some("cloud metadata service (169.254.169.254)")
        );
        assert_eq!(blocked_literal("127.0.0.1", &allow), None, "allowed");
        assert_eq!(
            blocked_literal("[::ffff:127.0.0.1]", &allow),
            None,
            "allowed by its IPv4"
        );
        assert_eq!(blocked_literal("93.184.215.14", &allow), None, "public");
        assert_eq!(
            blocked_literal("localhost", &allow),
            None,
            "a name: judged once resolved"
        );
        assert_eq!(blocked_literal("internal.example", &[]), None);
    }
}
