//! `#[derive(FromRow)]` for fiber_mysql: a struct with named fields read from a row by
//! column name. Use it as `fiber_mysql::FromRow`, which re-exports it beside the trait
//! (the trait's documentation is the user's guide); this crate is its proc-macro half
//! only, since a derive must live in a crate of its own.
//!
//! The generated impl reads each field with `RowExt::try_take::<FieldType>(&mut row,
//! "column")`, so that a failure names the column and the field's type. Attributes,
//! all under `fiber_mysql(..)`:
//! - on a field, `rename = "column"`: the column it reads (else the field's name, `r#`
//!   dropped);
//! - on the struct, `crate = "path"`: where fiber_mysql is (else `::fiber_mysql`), for
//!   code that reaches it through a re-export without depending on it.
//!
//! Refused at compile time, with the reason: enums, unions and tuple or unit structs
//! (no column names), two fields reading the same column (the first would move the
//! value out), an empty `rename`, and any other key.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{parse_macro_input, Data, DeriveInput, Fields, LitStr, Path};

/// Reads a row into a struct by column name: see `fiber_mysql::FromRow`.
#[proc_macro_derive(FromRow, attributes(fiber_mysql))]
pub fn derive_from_row(input: proc_macro::TokenStream) -> proc_macro::TokenStream {
    expand(parse_macro_input!(input as DeriveInput))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// The impl for `input`, or the error that refuses it.
fn expand(input: DeriveInput) -> syn::Result<TokenStream> {
    let krate = crate_path(&input)?;
    let fields = match &input.data {
        Data::Struct(s) => match &s.fields {
            Fields::Named(named) => &named.named,
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "FromRow reads columns by name into named fields: a tuple or unit \
                     struct has none (read a row by position into a tuple instead, e.g. \
                     `(i64, String)`)",
                ))
            }
        },
        _ => {
            return Err(syn::Error::new(
                input.ident.span(),
                "FromRow derives for structs with named fields only",
            ))
        }
    };
    // Which field reads each column: a column moved out once cannot be read again.
    let mut readers: BTreeMap<String, String> = BTreeMap::new();
    let mut inits = Vec::new();
    for field in fields {
        let ident = field.ident.as_ref().expect("named fields have names");
        let column = column_of(field)?;
        if let Some(first) = readers.insert(column.value(), ident.unraw().to_string()) {
            return Err(syn::Error::new(
                column.span(),
                format!(
                    "fields `{first}` and `{}` both read column `{}`: a column is read \
                     into one field (rename one of them)",
                    ident.unraw(),
                    column.value()
                ),
            ));
        }
        let ty = &field.ty;
        inits.push(quote_spanned! {ty.span()=>
            #ident: #krate::RowExt::try_take::<#ty>(&mut row, #column)?
        });
    }
    let name = &input.ident;
    let mut generics = input.generics.clone();
    if generics.type_params().next().is_some() {
        let predicates = &mut generics.make_where_clause().predicates;
        for field in fields {
            let ty = &field.ty;
            predicates.push(syn::parse_quote!(#ty: #krate::FromValue));
        }
    }
    let (impl_generics, ty_generics, where_clause) = generics.split_for_impl();
    Ok(quote! {
        #[automatically_derived]
        impl #impl_generics #krate::FromRow for #name #ty_generics #where_clause {
            #[allow(unused_mut)]
            fn from_row(mut row: #krate::Row) -> #krate::Result<Self> {
                ::core::result::Result::Ok(Self {
                    #(#inits,)*
                })
            }
        }
    })
}

/// `crate = ".."` of the struct's `fiber_mysql(..)` attributes, else `::fiber_mysql`.
fn crate_path(input: &DeriveInput) -> syn::Result<Path> {
    let mut path = None;
    for attr in input
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("fiber_mysql"))
    {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("crate") {
                let lit: LitStr = meta.value()?.parse()?;
                path = Some(lit.parse::<Path>()?);
                Ok(())
            } else {
                Err(meta.error(
                    "unknown fiber_mysql attribute on a struct: expected `crate = \"path\"` \
                     (`rename` goes on a field)",
                ))
            }
        })?;
    }
    Ok(path.unwrap_or_else(|| syn::parse_quote!(::fiber_mysql)))
}

/// The column `field` reads: its `rename`, else its name without `r#`.
fn column_of(field: &syn::Field) -> syn::Result<LitStr> {
    let ident = field.ident.as_ref().expect("named fields have names");
    let mut column = LitStr::new(&ident.unraw().to_string(), ident.span());
    for attr in field
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("fiber_mysql"))
    {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("rename") {
                let lit: LitStr = meta.value()?.parse()?;
                if lit.value().is_empty() {
                    return Err(syn::Error::new(lit.span(), "a column name is not empty"));
                }
                column = lit;
                Ok(())
            } else {
                Err(meta.error(
                    "unknown fiber_mysql attribute on a field: expected `rename = \"column\"`",
                ))
            }
        })?;
    }
    Ok(column)
}

#[cfg(test)]
mod tests {
    use super::expand;

    /// The derive's output for `item`, as text, or its error message.
    fn derive(item: &str) -> Result<String, String> {
        let input = syn::parse_str(item).expect("the test's item parses");
        expand(input)
            .map(|tokens| tokens.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn each_field_reads_its_column_as_its_type() {
        let out = derive(
            "struct User { id: i64, r#type: String, \
             #[fiber_mysql(rename = \"nick\")] nickname: Option<String> }",
        )
        .unwrap();
        for read in [
            "id : :: fiber_mysql :: RowExt :: try_take :: < i64 > (& mut row , \"id\") ?",
            "r#type : :: fiber_mysql :: RowExt :: try_take :: < String > (& mut row , \"type\") ?",
            "nickname : :: fiber_mysql :: RowExt :: try_take :: < Option < String > > (& mut row , \"nick\") ?",
        ] {
            assert!(out.contains(read), "{read}\nnot in\n{out}");
        }
        assert!(
            out.contains("impl :: fiber_mysql :: FromRow for User"),
            "{out}"
        );
    }

    #[test]
    fn the_crate_attribute_moves_every_path() {
        let out =
            derive("#[fiber_mysql(crate = \"fiber_web::mysql\")] struct W { id: u64 }").unwrap();
        assert!(!out.contains(":: fiber_mysql ::"), "{out}");
        assert!(
            out.contains("impl fiber_web :: mysql :: FromRow for W"),
            "{out}"
        );
        assert!(
            out.contains("fiber_web :: mysql :: RowExt :: try_take"),
            "{out}"
        );
    }

    #[test]
    fn a_generic_struct_asks_its_fields_to_convert() {
        let out = derive("struct Pair<T> { a: T, b: i64 }").unwrap();
        assert!(
            out.contains(
                "where T : :: fiber_mysql :: FromValue , i64 : :: fiber_mysql :: FromValue"
            ),
            "{out}"
        );
    }

    #[test]
    fn what_cannot_be_read_is_refused_with_the_reason() {
        let refused = [
            ("struct T(i64, String);", "a tuple or unit struct has none"),
            ("struct U;", "a tuple or unit struct has none"),
            ("enum E { A }", "structs with named fields only"),
            (
                "struct D { id: i64, #[fiber_mysql(rename = \"id\")] other: i64 }",
                "fields `id` and `other` both read column `id`",
            ),
            (
                "struct R { #[fiber_mysql(rename = \"\")] id: i64 }",
                "a column name is not empty",
            ),
            (
                "struct K { #[fiber_mysql(column = \"x\")] id: i64 }",
                "expected `rename = \"column\"`",
            ),
            (
                "#[fiber_mysql(rename = \"x\")] struct S { id: i64 }",
                "expected `crate = \"path\"`",
            ),
        ];
        for (item, reason) in refused {
            let message = derive(item).expect_err(item);
            assert!(message.contains(reason), "{item}: {message}");
        }
    }
}
