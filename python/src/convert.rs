//! The views `amos --json` prints as Python objects, made straight from
//! what serializes them (a `serde_json::Value`, or a view such as
//! `amos_node::front::HitView` that writes the same JSON without building
//! a `Value` first): an object becomes a `dict`, an array a `list`, a
//! number an `int` or a `float` (a float JSON cannot hold, `None`, as a
//! `Value` holds it), null `None`.
//!
//! Boundary: shape only; it never picks, renames or drops a field, so a
//! Python dict has exactly the fields of the CLI's JSON.

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use serde::Serialize;
use serde::ser::{self, Impossible, Serializer as _};

/// `v` as a Python object.
pub fn to_py<'py>(py: Python<'py>, v: &(impl Serialize + ?Sized)) -> PyResult<Bound<'py, PyAny>> {
    v.serialize(ToPy { py }).map_err(|e| e.0)
}

/// Why a value could not become a Python object.
#[derive(Debug)]
pub struct Failed(PyErr);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Failed {}

impl ser::Error for Failed {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Failed(PyValueError::new_err(msg.to_string()))
    }
}

impl From<PyErr> for Failed {
    fn from(e: PyErr) -> Self {
        Failed(e)
    }
}

/// The serializer whose output is a Python object.
#[derive(Clone, Copy)]
struct ToPy<'py> {
    py: Python<'py>,
}

type Out<'py> = Result<Bound<'py, PyAny>, Failed>;

impl<'py> ToPy<'py> {
    fn none(self) -> Out<'py> {
        Ok(self.py.None().into_bound(self.py))
    }

    fn int(self, v: impl IntoPyObject<'py>) -> Out<'py> {
        Ok(v.into_bound_py_any(self.py)?)
    }

    fn float(self, v: f64) -> Out<'py> {
        if v.is_finite() {
            Ok(v.into_bound_py_any(self.py)?)
        } else {
            self.none()
        }
    }

    /// `{variant: value}`, as serde_json writes an enum's data variant.
    fn tagged(self, variant: &'static str, value: Bound<'py, PyAny>) -> Out<'py> {
        let d = PyDict::new(self.py);
        d.set_item(PyString::new(self.py, variant), value)?;
        Ok(d.into_any())
    }
}

impl<'py> ser::Serializer for ToPy<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    type SerializeSeq = Seq<'py>;
    type SerializeTuple = Seq<'py>;
    type SerializeTupleStruct = Seq<'py>;
    type SerializeTupleVariant = Seq<'py>;
    type SerializeMap = Map<'py>;
    type SerializeStruct = Map<'py>;
    type SerializeStructVariant = Map<'py>;

    fn serialize_bool(self, v: bool) -> Out<'py> {
        Ok(v.into_bound_py_any(self.py)?)
    }
    fn serialize_i8(self, v: i8) -> Out<'py> {
        self.int(v)
    }
    fn serialize_i16(self, v: i16) -> Out<'py> {
        self.int(v)
    }
    fn serialize_i32(self, v: i32) -> Out<'py> {
        self.int(v)
    }
    fn serialize_i64(self, v: i64) -> Out<'py> {
        self.int(v)
    }
    fn serialize_i128(self, v: i128) -> Out<'py> {
        self.int(v)
    }
    fn serialize_u8(self, v: u8) -> Out<'py> {
        self.int(v)
    }
    fn serialize_u16(self, v: u16) -> Out<'py> {
        self.int(v)
    }
    fn serialize_u32(self, v: u32) -> Out<'py> {
        self.int(v)
    }
    fn serialize_u64(self, v: u64) -> Out<'py> {
        self.int(v)
    }
    fn serialize_u128(self, v: u128) -> Out<'py> {
        self.int(v)
    }
    fn serialize_f32(self, v: f32) -> Out<'py> {
        self.float(f64::from(v))
    }
    fn serialize_f64(self, v: f64) -> Out<'py> {
        self.float(v)
    }
    fn serialize_char(self, v: char) -> Out<'py> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Out<'py> {
        Ok(PyString::new(self.py, v).into_any())
    }
    fn serialize_bytes(self, v: &[u8]) -> Out<'py> {
        Ok(PyList::new(self.py, v)?.into_any())
    }
    fn serialize_none(self) -> Out<'py> {
        self.none()
    }
    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Out<'py> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Out<'py> {
        self.none()
    }
    fn serialize_unit_struct(self, _: &'static str) -> Out<'py> {
        self.none()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Out<'py> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Out<'py> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Out<'py> {
        let v = value.serialize(self)?;
        self.tagged(variant, v)
    }
    fn serialize_seq(self, len: Option<usize>) -> Result<Seq<'py>, Failed> {
        Ok(Seq {
            to: self,
            items: Vec::with_capacity(len.unwrap_or(0)),
            variant: None,
        })
    }
    fn serialize_tuple(self, len: usize) -> Result<Seq<'py>, Failed> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<Seq<'py>, Failed> {
        self.serialize_seq(Some(len))
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Seq<'py>, Failed> {
        let mut s = self.serialize_seq(Some(len))?;
        s.variant = Some(variant);
        Ok(s)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Map<'py>, Failed> {
        Ok(Map {
            to: self,
            dict: PyDict::new(self.py),
            key: None,
            variant: None,
        })
    }
    fn serialize_struct(self, _: &'static str, len: usize) -> Result<Map<'py>, Failed> {
        self.serialize_map(Some(len))
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Map<'py>, Failed> {
        let mut m = self.serialize_map(Some(len))?;
        m.variant = Some(variant);
        Ok(m)
    }
}

/// A list being filled (a tuple variant's: then `{variant: list}`).
struct Seq<'py> {
    to: ToPy<'py>,
    items: Vec<Bound<'py, PyAny>>,
    variant: Option<&'static str>,
}

impl<'py> Seq<'py> {
    fn push<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failed> {
        self.items.push(value.serialize(self.to)?);
        Ok(())
    }

    fn done(self) -> Out<'py> {
        let list = PyList::new(self.to.py, self.items)?.into_any();
        match self.variant {
            Some(v) => self.to.tagged(v, list),
            None => Ok(list),
        }
    }
}

impl<'py> ser::SerializeSeq for Seq<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failed> {
        self.push(value)
    }
    fn end(self) -> Out<'py> {
        self.done()
    }
}

impl<'py> ser::SerializeTuple for Seq<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    fn serialize_element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failed> {
        self.push(value)
    }
    fn end(self) -> Out<'py> {
        self.done()
    }
}

impl<'py> ser::SerializeTupleStruct for Seq<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failed> {
        self.push(value)
    }
    fn end(self) -> Out<'py> {
        self.done()
    }
}

impl<'py> ser::SerializeTupleVariant for Seq<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    fn serialize_field<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failed> {
        self.push(value)
    }
    fn end(self) -> Out<'py> {
        self.done()
    }
}

/// A dict being filled (a struct variant's: then `{variant: dict}`).
struct Map<'py> {
    to: ToPy<'py>,
    dict: Bound<'py, PyDict>,
    key: Option<Bound<'py, PyAny>>,
    variant: Option<&'static str>,
}

impl<'py> Map<'py> {
    fn done(self) -> Out<'py> {
        let dict = self.dict.into_any();
        match self.variant {
            Some(v) => self.to.tagged(v, dict),
            None => Ok(dict),
        }
    }
}

impl<'py> ser::SerializeMap for Map<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result<(), Failed> {
        self.key = Some(key.serialize(Key(self.to))?);
        Ok(())
    }
    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result<(), Failed> {
        let key = self
            .key
            .take()
            .ok_or_else(|| <Failed as ser::Error>::custom("a map value without its key"))?;
        self.dict.set_item(key, value.serialize(self.to)?)?;
        Ok(())
    }
    fn serialize_entry<K: Serialize + ?Sized, V: Serialize + ?Sized>(
        &mut self,
        key: &K,
        value: &V,
    ) -> Result<(), Failed> {
        self.dict
            .set_item(key.serialize(Key(self.to))?, value.serialize(self.to)?)?;
        Ok(())
    }
    fn end(self) -> Out<'py> {
        self.done()
    }
}

impl<'py> ser::SerializeStruct for Map<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Failed> {
        self.dict
            .set_item(PyString::new(self.to.py, key), value.serialize(self.to)?)?;
        Ok(())
    }
    fn end(self) -> Out<'py> {
        self.done()
    }
}

impl<'py> ser::SerializeStructVariant for Map<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        value: &T,
    ) -> Result<(), Failed> {
        ser::SerializeStruct::serialize_field(self, key, value)
    }
    fn end(self) -> Out<'py> {
        self.done()
    }
}

/// A map key as JSON has it: a string (a number or a bool as its text, as
/// serde_json writes one); anything else is refused.
struct Key<'py>(ToPy<'py>);

impl<'py> Key<'py> {
    fn text(self, v: impl std::fmt::Display) -> Out<'py> {
        self.0.serialize_str(&v.to_string())
    }

    fn refused(&self) -> Failed {
        <Failed as ser::Error>::custom("a map key that is not a string")
    }
}

impl<'py> ser::Serializer for Key<'py> {
    type Ok = Bound<'py, PyAny>;
    type Error = Failed;
    type SerializeSeq = Impossible<Bound<'py, PyAny>, Failed>;
    type SerializeTuple = Impossible<Bound<'py, PyAny>, Failed>;
    type SerializeTupleStruct = Impossible<Bound<'py, PyAny>, Failed>;
    type SerializeTupleVariant = Impossible<Bound<'py, PyAny>, Failed>;
    type SerializeMap = Impossible<Bound<'py, PyAny>, Failed>;
    type SerializeStruct = Impossible<Bound<'py, PyAny>, Failed>;
    type SerializeStructVariant = Impossible<Bound<'py, PyAny>, Failed>;

    fn serialize_str(self, v: &str) -> Out<'py> {
        self.0.serialize_str(v)
    }
    fn serialize_char(self, v: char) -> Out<'py> {
        self.0.serialize_char(v)
    }
    fn serialize_bool(self, v: bool) -> Out<'py> {
        self.text(v)
    }
    fn serialize_i8(self, v: i8) -> Out<'py> {
        self.text(v)
    }
    fn serialize_i16(self, v: i16) -> Out<'py> {
        self.text(v)
    }
    fn serialize_i32(self, v: i32) -> Out<'py> {
        self.text(v)
    }
    fn serialize_i64(self, v: i64) -> Out<'py> {
        self.text(v)
    }
    fn serialize_i128(self, v: i128) -> Out<'py> {
        self.text(v)
    }
    fn serialize_u8(self, v: u8) -> Out<'py> {
        self.text(v)
    }
    fn serialize_u16(self, v: u16) -> Out<'py> {
        self.text(v)
    }
    fn serialize_u32(self, v: u32) -> Out<'py> {
        self.text(v)
    }
    fn serialize_u64(self, v: u64) -> Out<'py> {
        self.text(v)
    }
    fn serialize_u128(self, v: u128) -> Out<'py> {
        self.text(v)
    }
    fn serialize_f32(self, _: f32) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_f64(self, _: f64) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_bytes(self, _: &[u8]) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_none(self) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_some<T: Serialize + ?Sized>(self, _: &T) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_unit(self) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Out<'py> {
        self.0.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        value: &T,
    ) -> Out<'py> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Out<'py> {
        Err(self.refused())
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Failed> {
        Err(self.refused())
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Failed> {
        Err(self.refused())
    }
    fn serialize_tuple_struct(
        self,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleStruct, Failed> {
        Err(self.refused())
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Failed> {
        Err(self.refused())
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Failed> {
        Err(self.refused())
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeStruct, Failed> {
        Err(self.refused())
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Failed> {
        Err(self.refused())
    }
}
