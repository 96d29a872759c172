// The link and network presets of the prediction (predict.hpp): one table each, which --link,
// --network and --help read. Kept apart from the model so that the flag parser (and its fuzz
// target) can name them without linking the model.
#include "engine/parallel/predict.hpp"

namespace tb::parallel {

// Bus bandwidths are what NCCL's ring all-reduce reaches (nccl-tests' busbw), not the line rate;
// latencies are per step of a ring: on NCCL's links the ring/Simple step of its tuning model
// (NVIDIA/nccl src/graph/tuning.cc, hwLat: NVLink 3.4 us, PCIe 5.7, network 14), whose table
// gives the other protocols and the tree (kProtocols below). Sources:
// - nvlink4: H100 SXM on an 8-GPU HGX board. NVLink 4 line rate 450 GB/s per direction (NVIDIA
//   H100 datasheet: 900 GB/s bidirectional); "with the protocol overhead (~20%) NCCL can get an
//   effective NVLink bandwidth of 370GB/s" as ring busbw (NCCL's maintainer, NVIDIA/nccl-tests
//   issue 212); NCCL_ALGO=RING measured 365-370 at 2 to 8 GPUs (NVIDIA/nccl#1455), the band.
//   NVLink SHARP reaches more (~480 GB/s): nvlink4_nvls.
// - nvlink4_nvls: the same board with NVLink SHARP (the NVSwitch reduces): nccl-tests' busbw with
//   NCCL_ALGO=NVLS equals the ring's 365-370 GB/s up to 4 GPUs and reaches 420, 440, 460 and 480 at
//   5 to 8 (NVIDIA/nccl#1455; ~475-480 at 8 in nccl-tests#212, #272, #290); NCCL's latency for it is
//   25 us (hwLat NVLink NVLS, 2.28).
// - nvlink3: A100 SXM on an 8-GPU board: 300 GB/s per direction (A100 datasheet: 600 GB/s);
//   nccl-tests all_reduce busbw of about 200-208 GB/s reported on 8x A100 boards
//   (NVIDIA/nccl-tests issues 149 and 178), up to 232.5 at the largest sizes of an HGX A100 sweep
//   (nccl-tests issue 175).
// - ll_max_gbps, NCCL's cap on LL's bus bandwidth within one node by the GPUs' generation
//   (llMaxBws, tuning.cc 2.28): Hopper's 141 GB/s for nvlink4, Ampere's 87.7 for nvlink3.
// - pcie3: x16 between GPUs: 8 GT/s per lane, 15.75 GB/s per direction; 12 GB/s is NCCL's own
//   figure for PCIe 3 x16 (PCI_BW in src/graph/topo.h), no nccl-tests measurement with a figure
//   was found.
// - pcie4, pcie5: x16 between GPUs: 16 and 32 GT/s per lane, about 31.5 and 63 GB/s per
//   direction (PCI-SIG PCIe 4.0 and 5.0); 75% of that as busbw (protocol and the switch).
// - pcie4, pcie5 (low): eight GPUs whose ring crosses a PCIe switch or a CPU socket reach far
//   less than the link: about 20 GB/s busbw across sockets on an 8x A100 board
//   (NVIDIA/nccl-tests issue 178), 28 GB/s with 8x RTX 5090 on PCIe 5.0 behind switches on two
//   sockets, 35 with 4 (NVIDIA/nccl issue 1639, where NCCL's maintainer notes that on PCIe
//   systems the CPUs' and memory's bandwidth sets it).
// - ib_ndr400 (per NIC): one 400 Gb/s InfiniBand NDR port (NVIDIA ConnectX-7): 50 GB/s line,
//   45 as busbw; nccl-tests measure 46-49 GB/s per NIC (NVIDIA/nccl-tests issues 267 and 290),
//   the band's high end across nodes.
//   A DGX H100 node has eight (ib_ndr400x8): 300-370 GB/s busbw across nodes of 8 H100
//   (NVIDIA/nccl issue 1221, NVIDIA/nccl-tests issue 283), so 37.5 per NIC at the low end.
// - 100gbe: 100 Gb Ethernet over NCCL's TCP sockets: 4-6 GB/s busbw across 4 nodes of 8 V100
//   (NVIDIA/nccl issue 450).
// - 25gbe: 25 Gb Ethernet over TCP sockets: NCCL's all-reduce topped at 1.7 GB/s busbw across two
//   Azure nodes whose TCP carried 21-25 Gb/s (NVIDIA/nccl-tests issue 83).
// - 10gbe: 10 Gb Ethernet over TCP sockets: no published NCCL figure was found; 25gbe's 1.7 GB/s is
//   54% of its 3.1 GB/s line rate, and the same share of 10 Gb/s is 0.68 GB/s, with a wide band.
const std::vector<Link>& link_presets() {
  static const std::vector<Link> presets{
      {.name = "nvlink4",
       .busbw_gbps = 370,
       .latency_us = 3.4,
       .source = "NVLink 4 (H100 SXM, 8-GPU board): ring busbw ~370 GB/s, NVIDIA/nccl-tests#212",
       .busbw_low_gbps = 365,
       .low_source = "NCCL_ALGO=RING at 2-8 GPUs: 365-370 GB/s (NVIDIA/nccl#1455)",
       .hw = Hw::NVLink,
       .ll_max_gbps = 141},
      {.name = "nvlink4_nvls",
       .busbw_gbps = 370,
       .latency_us = 3.4,
       .source = "NVLink 4 with NVLink SHARP (H100 SXM, 8-GPU board): ring busbw ~370 GB/s, NVLS 420-480 GB/s at "
                 "5-8 GPUs (nccl-tests, NVIDIA/nccl#1455)",
       .busbw_low_gbps = 365,
       .low_source = "NCCL_ALGO=RING at 2-8 GPUs: 365-370 GB/s (NVIDIA/nccl#1455)",
       .hw = Hw::NVLink,
       .nvls = true,
       .ll_max_gbps = 141},
      {.name = "nvlink3",
       .busbw_gbps = 200,
       .latency_us = 3.4,
       .source = "NVLink 3 (A100 SXM, 8-GPU board): busbw ~200 GB/s, NVIDIA/nccl-tests#149, #178",
       .busbw_high_gbps = 232.5,
       .hw = Hw::NVLink,
       .ll_max_gbps = 87.7},
      {.name = "pcie3",
       .busbw_gbps = 12,
       .latency_us = 5.7,
       .source = "PCIe 3.0 x16: 15.75 GB/s per direction (PCI-SIG); 12 GB/s, NCCL's own figure for it (PCI_BW, "
                 "src/graph/topo.h)",
       .busbw_low_gbps = 10,
       .low_source = "about half of PCIe 4's 20 GB/s across CPU sockets (NVIDIA/nccl-tests#178)",
       .hw = Hw::PCIe},
      {.name = "pcie4",
       .busbw_gbps = 24,
       .latency_us = 5.7,
       .source = "PCIe 4.0 x16: 31.5 GB/s per direction (PCI-SIG), 75% as busbw",
       .busbw_low_gbps = 20,
       .low_source = "~20 GB/s with 8 GPUs across CPU sockets, NVIDIA/nccl-tests#178",
       .hw = Hw::PCIe},
      {.name = "pcie5",
       .busbw_gbps = 48,
       .latency_us = 5.7,
       .source = "PCIe 5.0 x16: 63 GB/s per direction (PCI-SIG), 75% as busbw",
       .busbw_low_gbps = 28,
       .low_source = "28 GB/s with 8 GPUs behind PCIe switches on two sockets, NVIDIA/nccl#1639",
       .hw = Hw::PCIe},
      {.name = "ib_ndr400",
       .busbw_gbps = 45,
       .latency_us = 14,
       .source = "InfiniBand NDR 400 Gb/s per GPU (NVIDIA ConnectX-7): 50 GB/s, 90% as busbw (46-49 measured, "
                 "NVIDIA/nccl-tests#267, #290)",
       .hw = Hw::Net},
  };
  return presets;
}

const std::vector<Link>& network_presets() {
  static const std::vector<Link> presets{
      {.name = "ib_ndr400",
       .busbw_gbps = 45,
       .latency_us = 14,
       .source = "InfiniBand NDR 400 Gb/s per NIC (ConnectX-7): 45 GB/s busbw (46-49 measured, NVIDIA/nccl-tests#267, "
                 "#290)",
       .busbw_low_gbps = 37.5,
       .low_source = "300-370 GB/s across nodes of 8 H100 with 8 NDR NICs (NVIDIA/nccl#1221, nccl-tests#283): 37.5 per "
                     "NIC",
       .busbw_high_gbps = 49,
       .hw = Hw::Net},
      {.name = "100gbe",
       .busbw_gbps = 5,
       .latency_us = 14,
       .source = "100 Gb Ethernet, NCCL over TCP sockets: 4-6 GB/s busbw, 4 nodes of 8 V100 (NVIDIA/nccl#450)",
       .busbw_low_gbps = 4,
       .low_source = "the low end of NVIDIA/nccl#450's 4-6 GB/s",
       .busbw_high_gbps = 6,
       .hw = Hw::Net},
      {.name = "25gbe",
       .busbw_gbps = 1.7,
       .latency_us = 14,
       .source = "25 Gb Ethernet, NCCL over TCP sockets: 1.7 GB/s busbw at most, 2 Azure nodes (NVIDIA/nccl-tests#83)",
       .hw = Hw::Net},
      {.name = "10gbe",
       .busbw_gbps = 0.68,
       .latency_us = 14,
       .source = "10 Gb Ethernet, NCCL over TCP sockets: no published measurement found; 25gbe's share of its line "
                 "rate (1.7 of 3.1 GB/s, NVIDIA/nccl-tests#83) of 10 Gb/s",
       .busbw_low_gbps = 0.5,
       .low_source = "a band of -25% to +60% for a figure scaled, not measured",
       .busbw_high_gbps = 1.1,
       .hw = Hw::Net},
  };
  return presets;
}

}  // namespace tb::parallel
