//! What a routing or table call is asked to do: the routing spec (a
//! builder over `memra_route_spec`) and the table options
//! (`memra_vrows_options`), with every address tagged by the memory it
//! lives in, so a device address never reaches the host arm nor a host one
//! the kernel.

use std::marker::PhantomData;
use std::os::raw::c_int;

use crate::dev::{Bf16, DevSlice, Pod, F16};
use crate::error::{Error, Result, Status};
use crate::ffi::{self, abi};

/// How logits become scores (`memra_route_scoring`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scoring {
    /// exp(x - max) / sum: Mixtral, Qwen-MoE, DeepSeek-V2.
    Softmax,
    /// 1 / (1 + exp(-x)): DeepSeek-V3, GLM-4.5, Kimi-K2, Llama-4.
    Sigmoid,
}

/// How a group is scored when `n_group > 1` (`memra_group_scoring`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupScoring {
    /// The sum of its two best choice scores: DeepSeek-V3 (with a bias).
    Top2Sum,
    /// Its best choice score: DeepSeek-V2, vLLM's `grouped_topk` without a bias.
    Max,
}

/// The element type of the logits (`memra_logits_dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogitsDtype {
    F32,
    Bf16,
    F16,
}

/// The element type of a bias read in place (`memra_bias_dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BiasDtype {
    F32,
    Bf16,
}

/// An element type logits may have: `f32`, [`Bf16`], [`F16`].
pub trait LogitsElem: Pod {
    const DTYPE: LogitsDtype;
}
impl LogitsElem for f32 {
    const DTYPE: LogitsDtype = LogitsDtype::F32;
}
impl LogitsElem for Bf16 {
    const DTYPE: LogitsDtype = LogitsDtype::Bf16;
}
impl LogitsElem for F16 {
    const DTYPE: LogitsDtype = LogitsDtype::F16;
}

/// An element type a bias read in place may have: `f32`, [`Bf16`].
pub trait BiasElem: Pod {
    const DTYPE: BiasDtype;
}
impl BiasElem for f32 {
    const DTYPE: BiasDtype = BiasDtype::F32;
}
impl BiasElem for Bf16 {
    const DTYPE: BiasDtype = BiasDtype::Bf16;
}

/// An element type of a count the library reads or adds into
/// (`memra_count_dtype`): a padded batch's real-token count, an expert-load
/// buffer. `i32` or `i64`.
pub trait CountElem: Pod {
    #[doc(hidden)]
    const DTYPE: c_int;
}
impl CountElem for i32 {
    const DTYPE: c_int = abi::MEMRA_COUNT_I32;
}
impl CountElem for i64 {
    const DTYPE: c_int = abi::MEMRA_COUNT_I64;
}

/// Which arm a call runs in: where the addresses it is given must live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arm {
    Host,
    Device,
}

impl Arm {
    fn name(self) -> &'static str {
        match self {
            Arm::Host => "the host arm",
            Arm::Device => "a device call",
        }
    }
}

/// An array the C library reads in place: address, length, and the memory
/// it is in.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InPlace<'a> {
    addr: u64,
    len: usize,
    arm: Arm,
    /// A memra buffer's device (see `DevSlice`).
    home: Option<i32>,
    _a: PhantomData<&'a ()>,
}

impl<'a> InPlace<'a> {
    pub(crate) fn host<T>(s: &'a [T]) -> InPlace<'a> {
        InPlace {
            addr: s.as_ptr() as u64,
            len: s.len(),
            arm: Arm::Host,
            home: None,
            _a: PhantomData,
        }
    }

    pub(crate) fn device<T>(s: DevSlice<'a, T>) -> InPlace<'a> {
        InPlace {
            addr: s.device_ptr(),
            len: s.len(),
            arm: Arm::Device,
            home: s.home(),
            _a: PhantomData,
        }
    }

    /// The device of the engine whose buffer this is (None: host memory or
    /// from `from_raw`).
    pub(crate) fn home(&self) -> Option<i32> {
        self.home
    }

    /// The address for `arm`, once it is in that arm's memory and holds at
    /// least `need` elements (exactly `need` for a host slice).
    pub(crate) fn check(&self, what: &str, arm: Arm, need: usize) -> Result<u64> {
        self.check_for(what, arm, need, &format!("n_expert = {need}"))
    }

    /// As `check`, `why` saying what asks for `need` elements.
    pub(crate) fn check_for(&self, what: &str, arm: Arm, need: usize, why: &str) -> Result<u64> {
        if self.arm != arm {
            let (is, fix) = match self.arm {
                Arm::Host => ("host memory", "a device array (the _device setter)"),
                Arm::Device => ("device memory", "a host slice"),
            };
            return Err(Error::arg(
                Status::InvalidArg,
                format!("{what} is in {is}; {} reads {fix}", arm.name()),
            ));
        }
        let short = match self.arm {
            Arm::Host => self.len != need,
            Arm::Device => self.len < need,
        };
        if short {
            return Err(Error::arg(
                Status::InvalidArg,
                format!("{what} holds {} elements; {why}", self.len),
            ));
        }
        Ok(self.addr)
    }
}

#[derive(Clone, Copy, Debug)]
enum Bias<'a> {
    None,
    /// `spec.bias`: checked up front, mirrored per layer for the device.
    Checked(&'a [f32]),
    /// `spec.bias_ptr`: read in place, unchecked.
    InPlace(InPlace<'a>, BiasDtype),
}

/// Expert parallelism and fused shared experts for the table calls
/// (`memra_vrows_options`). `VrowsOptions::default()` is none.
///
/// ```
/// # use memra::VrowsOptions;
/// // This rank holds experts 4..8 of 8 in slots 0..4, plus one shared expert.
/// let map: Vec<i32> = (0..8).map(|e| if e >= 4 { e - 4 } else { -1 }).collect();
/// let o = VrowsOptions::default().expert_map(&map, 4).shared_experts(1);
/// assert_eq!(o.n_slots(8), 5);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct VrowsOptions<'a> {
    map: Option<InPlace<'a>>,
    n_local: u32,
    n_shared: u32,
}

impl<'a> VrowsOptions<'a> {
    /// `map[e]`: global expert `e`'s slot in this rank's slabs and macro
    /// planes, or -1 where another rank holds it (a host slice of
    /// `n_expert` ids, for the host arms). `n_local`: the slots a map may
    /// name.
    pub fn expert_map(mut self, map: &'a [i32], n_local: u32) -> Self {
        self.map = Some(InPlace::host(map));
        self.n_local = n_local;
        self
    }

    /// The same map as a device array (at least `n_expert` ids), read in
    /// place by the kernel: the engine may update it between steps.
    pub fn expert_map_device(mut self, map: DevSlice<'a, i32>, n_local: u32) -> Self {
        self.map = Some(InPlace::device(map));
        self.n_local = n_local;
        self
    }

    /// `n_shared` shared experts, ids `n_expert ..`, in the slots after the
    /// routed ones.
    pub fn shared_experts(mut self, n_shared: u32) -> Self {
        self.n_shared = n_shared;
        self
    }

    /// The experts the slabs and macro planes hold: `(map ? n_local :
    /// n_expert) + n_shared`.
    pub fn n_slots(&self, n_expert: u32) -> u64 {
        let routed = if self.map.is_some() {
            self.n_local
        } else {
            n_expert
        };
        routed as u64 + self.n_shared as u64
    }

    /// The device of the engine whose buffer the map is (None: host memory
    /// or from `from_raw`).
    pub(crate) fn home(&self) -> Option<i32> {
        self.map.and_then(|m| m.home)
    }

    pub(crate) fn raw(&self, arm: Arm, n_expert: u32) -> Result<ffi::VrowsOptions> {
        self.raw_named(arm, n_expert, "options: expert_map")
    }

    fn raw_named(&self, arm: Arm, n_expert: u32, what: &str) -> Result<ffi::VrowsOptions> {
        let expert_map = match &self.map {
            Some(m) => m.check(what, arm, n_expert as usize)?,
            None => 0,
        };
        Ok(ffi::VrowsOptions {
            expert_map,
            n_local: self.n_local,
            n_shared: self.n_shared,
        })
    }
}

/// A routing spec (`memra_route_spec`), built from `new(n_expert, top_k)`.
///
/// Defaults: softmax, one group, no renormalization, a scaling factor of
/// 1, no bias, no map, no shared experts, the logits' element type taken
/// from the slice the call is given. Group scoring defaults as vLLM's
/// `grouped_topk` does: the sum of the top two with a bias, the best
/// without one; [`RouteSpec::group_scoring`] says which explicitly.
///
/// The library checks every value (a bad one is `Status::InvalidArg` with a
/// message naming the field); this type checks what only it knows: slice
/// lengths, and that each address is in the memory of the arm that reads it.
///
/// ```
/// # use memra::{RouteSpec, Scoring, GroupScoring};
/// # let bias = vec![0.0f32; 256];
/// // DeepSeek-V3: sigmoid, 8 groups of which 4 stay, top 8, a score bias.
/// let spec = RouteSpec::new(256, 8)
///     .scoring(Scoring::Sigmoid)
///     .groups(8, 4)
///     .bias(&bias)
///     .renormalize(true)
///     .routed_scaling_factor(2.5);
/// assert_eq!(spec.resolved_group_scoring(), GroupScoring::Top2Sum);
/// ```
#[derive(Clone, Copy, Debug)]
pub struct RouteSpec<'a> {
    n_expert: u32,
    top_k: u32,
    n_group: u32,
    topk_group: u32,
    scoring: Scoring,
    group_scoring: Option<GroupScoring>,
    logits_dtype: Option<LogitsDtype>,
    renormalize: bool,
    routed_scaling_factor: f32,
    bias: Bias<'a>,
    options: VrowsOptions<'a>,
    shared_weight: f32,
    /// SGLang's rule for the shared experts' weight: its divisor.
    shared_divisor: Option<f32>,
    /// A padded batch's real-token count, read in place, and its type.
    n_real: Option<(InPlace<'a>, c_int)>,
}

impl<'a> RouteSpec<'a> {
    /// `n_expert` routed experts (1 ..= 1024), `top_k` of them per token.
    pub fn new(n_expert: u32, top_k: u32) -> RouteSpec<'a> {
        RouteSpec {
            n_expert,
            top_k,
            n_group: 1,
            topk_group: 1,
            scoring: Scoring::Softmax,
            group_scoring: None,
            logits_dtype: None,
            renormalize: false,
            routed_scaling_factor: 1.0,
            bias: Bias::None,
            options: VrowsOptions::default(),
            shared_weight: 0.0,
            shared_divisor: None,
            n_real: None,
        }
    }

    pub fn scoring(mut self, s: Scoring) -> Self {
        self.scoring = s;
        self
    }

    /// Grouped top-k: `n_group` equal groups (dividing `n_expert`), of which
    /// the best `topk_group` stay in play.
    pub fn groups(mut self, n_group: u32, topk_group: u32) -> Self {
        self.n_group = n_group;
        self.topk_group = topk_group;
        self
    }

    /// How a group is scored, overriding the default (see the type's doc).
    pub fn group_scoring(mut self, g: GroupScoring) -> Self {
        self.group_scoring = Some(g);
        self
    }

    /// The logits' element type; the call's slice must then have it. Unset,
    /// it is the slice's.
    pub fn logits_dtype(mut self, d: LogitsDtype) -> Self {
        self.logits_dtype = Some(d);
        self
    }

    /// Divide the `top_k` weights by their sum.
    pub fn renormalize(mut self, on: bool) -> Self {
        self.renormalize = on;
        self
    }

    /// Multiply the routed weights (finite and > 0).
    pub fn routed_scaling_factor(mut self, f: f32) -> Self {
        self.routed_scaling_factor = f;
        self
    }

    /// The score-correction bias (DeepSeek-V3's `e_score_correction_bias`),
    /// `n_expert` finite floats on the host, added for choosing only. Both
    /// arms take it: device calls mirror it per layer (prepare the layer
    /// before capturing a graph). Replaces any bias set before.
    pub fn bias(mut self, bias: &'a [f32]) -> Self {
        self.bias = Bias::Checked(bias);
        self
    }

    /// A bias on the host read in place by the host arm (`f32` or [`Bf16`]),
    /// never copied or checked beforehand: a non-finite value faults the
    /// tokens that meet it, as on the device. The host counterpart of
    /// [`RouteSpec::bias_device`], for replaying a device call exactly.
    pub fn bias_host<B: BiasElem>(mut self, bias: &'a [B]) -> Self {
        self.bias = Bias::InPlace(InPlace::host(bias), B::DTYPE);
        self
    }

    /// A bias in device memory (a CUDA tensor's, `f32` or [`Bf16`] as
    /// checkpoints ship it), read in place by the kernel with no copy.
    pub fn bias_device<B: BiasElem>(mut self, bias: DevSlice<'a, B>) -> Self {
        self.bias = Bias::InPlace(InPlace::device(bias), B::DTYPE);
        self
    }

    /// Expert parallelism: `map[e]` is global expert `e`'s slot in this
    /// rank's slabs and planes, or -1 (another rank's: NULL pointers, zero
    /// scales, counted in `Faults::not_local`). A host slice of `n_expert`,
    /// for the host arm.
    pub fn expert_map(mut self, map: &'a [i32], n_local: u32) -> Self {
        self.options = self.options.expert_map(map, n_local);
        self
    }

    /// The map as a device array, read in place by the kernel.
    pub fn expert_map_device(mut self, map: DevSlice<'a, i32>, n_local: u32) -> Self {
        self.options = self.options.expert_map_device(map, n_local);
        self
    }

    /// Fused shared experts (as SGLang does for DeepSeek): `n_shared` pairs
    /// appended to every token, ids `n_expert + i`, each with `weight`
    /// written as given.
    pub fn shared_experts(mut self, n_shared: u32, weight: f32) -> Self {
        self.options = self.options.shared_experts(n_shared);
        self.shared_weight = weight;
        self.shared_divisor = None;
        self
    }

    /// Fused shared experts weighted by SGLang's rule
    /// (`MEMRA_SHARED_ROUTED_SUM`): per token, the routed scores' sum over
    /// `divisor` (SGLang's `routed_scaling_factor`, 1.0 for none), then
    /// renormalized and scaled as the routed weights are.
    pub fn shared_experts_routed_sum(mut self, n_shared: u32, divisor: f32) -> Self {
        self.options = self.options.shared_experts(n_shared);
        self.shared_weight = 0.0;
        self.shared_divisor = Some(divisor);
        self
    }

    /// A padded batch (SGLang's `num_token_non_padded`, a graph captured at
    /// a padded size): one `i32` or `i64` in device memory, read in place
    /// by the kernel, counts the real tokens; the rows at or past it get id
    /// -1, weight +0, NULL pointers and +0 scales (`Faults::padded`, not a
    /// fault).
    pub fn n_real_device<C: CountElem>(mut self, count: DevSlice<'a, C>) -> Self {
        self.n_real = Some((InPlace::device(count), C::DTYPE));
        self
    }

    /// The host arm's counterpart of [`RouteSpec::n_real_device`]: a host
    /// slice of one count.
    pub fn n_real_host<C: CountElem>(mut self, count: &'a [C]) -> Self {
        self.n_real = Some((InPlace::host(count), C::DTYPE));
        self
    }

    pub fn n_expert(&self) -> u32 {
        self.n_expert
    }

    /// Pairs per token: `top_k + n_shared`.
    pub fn pairs_per_token(&self) -> u32 {
        self.top_k.saturating_add(self.options.n_shared)
    }

    /// The experts the slabs and macro planes hold (see `VrowsOptions::n_slots`).
    pub fn n_slots(&self) -> u64 {
        self.options.n_slots(self.n_expert)
    }

    /// The group scoring a call uses: the one set, else vLLM's default.
    pub fn resolved_group_scoring(&self) -> GroupScoring {
        match (self.group_scoring, &self.bias) {
            (Some(g), _) => g,
            (None, Bias::None) => GroupScoring::Max,
            (None, _) => GroupScoring::Top2Sum,
        }
    }

    /// The device arrays the spec names, each with the device of the engine
    /// whose buffer it is (None: from `from_raw`).
    pub(crate) fn homes(&self) -> [(&'static str, Option<i32>); 3] {
        let bias = match &self.bias {
            Bias::InPlace(p, _) => p.home,
            _ => None,
        };
        [
            ("spec: the bias", bias),
            ("spec: expert_map", self.options.home()),
            ("spec: n_real", self.n_real.and_then(|(p, _)| p.home)),
        ]
    }

    /// The layout's experts for a fused call: `n_expert + n_shared` (the
    /// routing's ids; `LayoutSpec::new(spec.layout_experts(), block_size)`).
    pub fn layout_experts(&self) -> u32 {
        self.n_expert.saturating_add(self.options.n_shared)
    }

    /// The C spec where the logits' type does not matter (preparing a layer).
    pub(crate) fn raw_any_logits(&self, arm: Arm) -> Result<ffi::RouteSpec> {
        self.raw(arm, self.logits_dtype.unwrap_or(LogitsDtype::F32))
    }

    /// The C spec for a call in `arm` on logits of type `logits`.
    pub(crate) fn raw(&self, arm: Arm, logits: LogitsDtype) -> Result<ffi::RouteSpec> {
        if let Some(d) = self.logits_dtype {
            if d != logits {
                return Err(Error::arg(
                    Status::InvalidArg,
                    format!("logits are {logits:?} but the spec says {d:?}"),
                ));
            }
        }
        let n = self.n_expert as usize;
        let (bias, bias_ptr, bias_dtype) = match &self.bias {
            Bias::None => (std::ptr::null(), 0, BiasDtype::F32),
            Bias::Checked(b) => {
                if b.len() != n {
                    return Err(Error::arg(
                        Status::InvalidArg,
                        format!("spec: bias holds {} floats; n_expert = {n}", b.len()),
                    ));
                }
                (b.as_ptr(), 0, BiasDtype::F32)
            }
            Bias::InPlace(p, d) => (std::ptr::null(), p.check("spec: the bias", arm, n)?, *d),
        };
        let o = self
            .options
            .raw_named(arm, self.n_expert, "spec: expert_map")?;
        let (n_real, n_real_dtype) = match &self.n_real {
            Some((p, d)) => (
                p.check_for("spec: n_real", arm, 1, "one count is read")?,
                *d,
            ),
            None => (0, abi::MEMRA_COUNT_I32),
        };
        Ok(ffi::RouteSpec {
            n_expert: self.n_expert,
            top_k: self.top_k,
            n_group: self.n_group,
            topk_group: self.topk_group,
            scoring: match self.scoring {
                Scoring::Softmax => abi::MEMRA_ROUTE_SOFTMAX,
                Scoring::Sigmoid => abi::MEMRA_ROUTE_SIGMOID,
            },
            logits_dtype: match logits {
                LogitsDtype::F32 => abi::MEMRA_LOGITS_F32,
                LogitsDtype::Bf16 => abi::MEMRA_LOGITS_BF16,
                LogitsDtype::F16 => abi::MEMRA_LOGITS_F16,
            },
            renormalize: self.renormalize as c_int,
            routed_scaling_factor: self.routed_scaling_factor,
            bias,
            // Unset, the library's MEMRA_GROUP_AUTO: the library applies
            // vLLM's rule (resolved_group_scoring() only says which).
            group_scoring: match self.group_scoring {
                None => abi::MEMRA_GROUP_AUTO,
                Some(GroupScoring::Top2Sum) => abi::MEMRA_GROUP_TOP2_SUM,
                Some(GroupScoring::Max) => abi::MEMRA_GROUP_MAX,
            },
            bias_dtype: match bias_dtype {
                BiasDtype::F32 => abi::MEMRA_BIAS_F32,
                BiasDtype::Bf16 => abi::MEMRA_BIAS_BF16,
            },
            bias_ptr,
            expert_map: o.expert_map,
            n_local: o.n_local,
            n_shared: o.n_shared,
            shared_weight: self.shared_weight,
            shared_rule: match self.shared_divisor {
                Some(_) => abi::MEMRA_SHARED_ROUTED_SUM,
                None => abi::MEMRA_SHARED_CONSTANT,
            },
            shared_divisor: self.shared_divisor.unwrap_or(0.0),
            n_real_dtype,
            n_real,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_scoring_defaults_as_vllm() {
        let bias = [0.0f32; 8];
        let b16 = [Bf16(0); 8];
        let plain = RouteSpec::new(8, 2).groups(4, 2);
        assert_eq!(plain.resolved_group_scoring(), GroupScoring::Max);
        assert_eq!(
            plain.bias(&bias).resolved_group_scoring(),
            GroupScoring::Top2Sum
        );
        assert_eq!(
            plain.bias_host(&b16).resolved_group_scoring(),
            GroupScoring::Top2Sum
        );
        let dev = unsafe { DevSlice::<f32>::from_raw(0x1000, 8) };
        assert_eq!(
            plain.bias_device(dev).resolved_group_scoring(),
            GroupScoring::Top2Sum
        );
        let explicit = plain.bias(&bias).group_scoring(GroupScoring::Max);
        assert_eq!(explicit.resolved_group_scoring(), GroupScoring::Max);
        let raw = explicit.raw(Arm::Host, LogitsDtype::F32).unwrap();
        assert_eq!(
            (raw.group_scoring, raw.bias, raw.bias_ptr),
            (2, bias.as_ptr(), 0)
        );
    }

    #[test]
    fn addresses_must_be_in_the_arms_memory() {
        let map = [0i32, -1, 1, -1];
        let dmap = unsafe { DevSlice::<i32>::from_raw(0x2000, 4) };
        let e = RouteSpec::new(4, 1)
            .expert_map_device(dmap, 2)
            .raw(Arm::Host, LogitsDtype::F32);
        let e = e.unwrap_err();
        assert_eq!(e.status(), Some(Status::InvalidArg));
        assert!(
            e.to_string()
                .contains("expert_map is in device memory; the host arm"),
            "{e}"
        );
        let e = RouteSpec::new(4, 1)
            .expert_map(&map, 2)
            .raw(Arm::Device, LogitsDtype::F32);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("expert_map is in host memory"));
        let b16 = [Bf16(0); 4];
        let e = RouteSpec::new(4, 1)
            .bias_host(&b16)
            .raw(Arm::Device, LogitsDtype::F32);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("the bias is in host memory"));
        let raw = RouteSpec::new(4, 1)
            .bias_host(&b16)
            .expert_map(&map, 2)
            .raw(Arm::Host, LogitsDtype::Bf16)
            .unwrap();
        assert_eq!(raw.bias_ptr, b16.as_ptr() as u64);
        assert_eq!((raw.bias_dtype, raw.logits_dtype), (1, 1));
        assert_eq!((raw.expert_map, raw.n_local), (map.as_ptr() as u64, 2));
    }

    #[test]
    fn lengths_and_dtypes_are_checked() {
        let short = [0.0f32; 3];
        let e = RouteSpec::new(4, 1)
            .bias(&short)
            .raw(Arm::Host, LogitsDtype::F32);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("bias holds 3 floats; n_expert = 4"));
        let dmap = unsafe { DevSlice::<i32>::from_raw(0x2000, 3) };
        let e = RouteSpec::new(4, 1)
            .expert_map_device(dmap, 2)
            .raw(Arm::Device, LogitsDtype::F32);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("holds 3 elements; n_expert = 4"));
        // A device array may be longer than needed; a host slice may not.
        let dmap = unsafe { DevSlice::<i32>::from_raw(0x2000, 64) };
        assert!(RouteSpec::new(4, 1)
            .expert_map_device(dmap, 2)
            .raw(Arm::Device, LogitsDtype::F32)
            .is_ok());
        let e = RouteSpec::new(4, 1)
            .logits_dtype(LogitsDtype::Bf16)
            .raw(Arm::Host, LogitsDtype::F16);
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("logits are F16 but the spec says Bf16"));
        let s = RouteSpec::new(4, 2).shared_experts(2, 0.5);
        assert_eq!((s.pairs_per_token(), s.n_slots()), (4, 6));
        let raw = s.raw(Arm::Device, LogitsDtype::F32).unwrap();
        assert_eq!(
            (raw.n_shared, raw.shared_weight.to_bits()),
            (2, 0.5f32.to_bits())
        );
    }
}
